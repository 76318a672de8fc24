package cdc.tests.mongo;

import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import de.bwaldvogel.mongo.bson.Document;
import io.netty.channel.Channel;
import io.netty.channel.embedded.EmbeddedChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The in-memory backend, with change events brought closer to what a real mongod sends.
 *
 * <p>mongo-java-server 1.47 builds update events from the raw update operators: {@code
 * documentKey} holds the operators instead of {@code {_id: ...}}, replacements are reported as
 * updates, and {@code ns}, {@code updateDescription} and the aggregate reply's {@code
 * operationTime} are missing. Each event's oplog entry (found by its cluster time) carries what is
 * needed to repair it, so the replies of change-stream cursors are rewritten here rather than the
 * connector under test learning a fake server's quirks.
 */
final class ChangeStreamBackend extends MemoryBackend {

  /** Open change-stream cursors, each with whether it asked for updateLookup. */
  private final Map<Long, Boolean> changeStreamCursors = new ConcurrentHashMap<>();

  /**
   * Indexes the oplog by timestamp. Each repaired event looks its oplog entry up by {@code ts};
   * without the (unique) index that is a full scan, and streaming n events costs O(n^2).
   */
  void indexOplogTimestamps() {
    Document index = new Document("key", new Document("ts", 1));
    index.put("name", "ts_1");
    index.put("unique", true);
    Document command = new Document("createIndexes", "oplog.rs");
    command.put("indexes", List.of(index));
    // The backend keys per-connection state by channel; a detached one stands in for a client.
    super.handleCommand(new EmbeddedChannel(), "local", "createIndexes", command);
  }

  @Override
  public Document handleCommand(Channel channel, String db, String command, Document query) {
    Document reply = super.handleCommand(channel, db, command, query);
    if (reply == null) {
      return null;
    }
    if ("aggregate".equalsIgnoreCase(command) && opensChangeStream(query)) {
      if (!reply.containsKey("operationTime")) {
        // Drivers resume from it after a network error when no event arrived yet. Second
        // precision with increment 0: such a resume may replay events of this second, never skip.
        reply.put("operationTime", new BsonTimestamp(getClock().instant(), 0));
      }
      repairBatch(channel, reply, "firstBatch", asksForLookup(query));
    } else if ("getMore".equalsIgnoreCase(command)) {
      Boolean lookup = changeStreamCursors.get(asLong(query.get("getMore")));
      if (lookup != null) {
        repairBatch(channel, reply, "nextBatch", lookup);
      }
    }
    return reply;
  }

  private static boolean opensChangeStream(Document query) {
    Object pipeline = query.get("pipeline");
    return pipeline instanceof List<?> stages
        && !stages.isEmpty()
        && stages.get(0) instanceof Map<?, ?> first
        && first.containsKey("$changeStream");
  }

  private static boolean asksForLookup(Document query) {
    List<?> stages = (List<?>) query.get("pipeline");
    Object options = ((Map<?, ?>) stages.get(0)).get("$changeStream");
    Object fullDocument = options instanceof Map<?, ?> map ? map.get("fullDocument") : null;
    return fullDocument != null && !"default".equals(fullDocument);
  }

  private void repairBatch(Channel channel, Document reply, String batchField, boolean lookup) {
    if (!(reply.get("cursor") instanceof Document cursor)) {
      return;
    }
    long cursorId = asLong(cursor.get("id"));
    if (cursorId != 0) {
      changeStreamCursors.put(cursorId, lookup);
    }
    if (cursor.get(batchField) instanceof List<?> events) {
      for (Object event : events) {
        if (event instanceof Document change) {
          repairEvent(channel, change, lookup);
        }
      }
    }
  }

  private void repairEvent(Channel channel, Document change, boolean lookup) {
    Document entry =
        findOne(channel, "local", "oplog.rs", new Document("ts", change.get("clusterTime")));
    if (entry == null) {
      return;
    }
    String ns = String.valueOf(entry.get("ns"));
    int dot = ns.indexOf('.');
    String db = ns.substring(0, dot);
    String collection = ns.substring(dot + 1);
    Document namespace = new Document("db", db);
    namespace.put("coll", collection);
    change.putIfAbsent("ns", namespace);
    if (!"u".equals(entry.get("op")) || !(entry.get("o") instanceof Document op)) {
      return;
    }
    Object documentKey = entry.get("o2");
    change.put("documentKey", documentKey);
    if (op.keySet().stream().noneMatch(k -> k.startsWith("$"))) {
      change.put("operationType", "replace");
      change.put("fullDocument", op);
      change.remove("updateDescription");
      return;
    }
    change.put("updateDescription", updateDescription(channel, db, collection, documentKey, op));
    // The library fills fullDocument with the operators' arguments. A real server sends none
    // without updateLookup, and with it the document as it is now (null once deleted).
    change.remove("fullDocument");
    if (lookup) {
      change.put(
          "fullDocument",
          documentKey instanceof Document key ? findOne(channel, db, collection, key) : null);
    }
  }

  /**
   * {@code $set} and {@code $unset} are exact. Other operators ({@code $inc}, {@code $push}, ...)
   * only name the field; its value is read from the document as it is now, like updateLookup.
   */
  private Document updateDescription(
      Channel channel, String db, String collection, Object documentKey, Document op) {
    Document updated = new Document();
    List<String> removed = new ArrayList<>();
    Document current = null;
    for (Map.Entry<String, Object> operator : op.entrySet()) {
      if (!(operator.getValue() instanceof Document fields)) {
        continue;
      }
      switch (operator.getKey()) {
        case "$set" -> updated.putAll(fields);
        case "$unset" -> removed.addAll(fields.keySet());
        default -> {
          if (current == null && documentKey instanceof Document key) {
            current = findOne(channel, db, collection, key);
          }
          for (String path : fields.keySet()) {
            updated.put(path, current == null ? null : valueAt(current, path));
          }
        }
      }
    }
    Document description = new Document("updatedFields", updated);
    description.put("removedFields", removed);
    description.put("truncatedArrays", new ArrayList<>());
    return description;
  }

  private static Object valueAt(Document document, String path) {
    Object value = document;
    for (String part : path.split("\\.")) {
      if (!(value instanceof Map<?, ?> map)) {
        return null;
      }
      value = map.get(part);
    }
    return value;
  }

  private Document findOne(Channel channel, String db, String collection, Document filter) {
    Document find = new Document("find", collection);
    find.put("filter", filter);
    find.put("limit", 1);
    find.put("singleBatch", true);
    Document reply = super.handleCommand(channel, db, "find", find);
    if (reply != null
        && reply.get("cursor") instanceof Document cursor
        && cursor.get("firstBatch") instanceof List<?> batch
        && !batch.isEmpty()
        && batch.get(0) instanceof Document found) {
      return found;
    }
    return null;
  }

  private static long asLong(Object value) {
    return value instanceof Number number ? number.longValue() : 0L;
  }
}
