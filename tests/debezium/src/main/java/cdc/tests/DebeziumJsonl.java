package cdc.tests;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * Runs the Debezium embedded engine and writes each record as one JSON line.
 *
 * <p>Usage: {@code DebeziumJsonl PROPERTIES [OUT|-] [MAX_RECORDS]}. PROPERTIES holds the engine's
 * and the connector's settings ({@code connector.class}, {@code offset.storage}, {@code
 * plugin.name}, ...). The keys under {@code key.converter.} and {@code value.converter.} configure
 * the two {@link JsonConverter}s the records are written with, as a Kafka Connect worker's
 * converters would be ({@code key.converter.schemas.enable=false}, ...); they are not passed to
 * the engine. Each line is {@code {"topic": ..., "key": <key JSON>, "value": <value JSON|null>}},
 * where key and value are the converter's bytes as written, spliced in unparsed, so the file holds
 * Debezium's JSON exactly. Each line is flushed when written. The runner stops after MAX_RECORDS
 * records (0 or absent: never) or on SIGTERM, closing the engine (which commits its offsets).
 *
 * <p>Exit codes: 0 stopped after MAX_RECORDS; 1 the engine stopped with an error; 2 bad arguments;
 * 143 on SIGTERM (the JVM's code), after the engine closed.
 */
public final class DebeziumJsonl {
  private static final String KEY_PREFIX = "key.converter.";
  private static final String VALUE_PREFIX = "value.converter.";

  private DebeziumJsonl() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 1 || args.length > 3) {
      System.err.println("usage: DebeziumJsonl PROPERTIES [OUT|-] [MAX_RECORDS]");
      System.exit(2);
    }
    Properties all = new Properties();
    try (InputStream in = new FileInputStream(args[0])) {
      all.load(in);
    }
    String out = args.length > 1 ? args[1] : "-";
    long max = args.length > 2 ? Long.parseLong(args[2]) : 0;
    OutputStream sink = "-".equals(out) ? System.out : new FileOutputStream(out, true);
    System.exit(run(all, sink, max));
  }

  private static int run(Properties all, OutputStream sink, long max) throws Exception {
    Properties engineProps = new Properties();
    Map<String, Object> keyConfig = new HashMap<>();
    Map<String, Object> valueConfig = new HashMap<>();
    for (String name : all.stringPropertyNames()) {
      if (name.startsWith(KEY_PREFIX)) {
        keyConfig.put(name.substring(KEY_PREFIX.length()), all.getProperty(name));
      } else if (name.startsWith(VALUE_PREFIX)) {
        valueConfig.put(name.substring(VALUE_PREFIX.length()), all.getProperty(name));
      } else if (!name.equals("key.converter") && !name.equals("value.converter")) {
        engineProps.setProperty(name, all.getProperty(name));
      }
    }
    JsonConverter keyConverter = new JsonConverter();
    keyConverter.configure(keyConfig, true);
    JsonConverter valueConverter = new JsonConverter();
    valueConverter.configure(valueConfig, false);

    Writer writer = new Writer(sink, keyConverter, valueConverter, max);
    AtomicReference<Throwable> failure = new AtomicReference<>();
    AtomicBoolean failed = new AtomicBoolean(false);
    CountDownLatch engineDone = new CountDownLatch(1);
    DebeziumEngine<RecordChangeEvent<SourceRecord>> engine =
        DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
            .using(engineProps)
            .notifying(
                (List<RecordChangeEvent<SourceRecord>> records,
                    DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer) -> {
                  for (RecordChangeEvent<SourceRecord> event : records) {
                    if (!writer.write(event.record())) {
                      break;
                    }
                    committer.markProcessed(event);
                  }
                  committer.markBatchFinished();
                })
            .using(
                (boolean success, String message, Throwable error) -> {
                  if (!success) {
                    failed.set(true);
                    failure.set(error);
                    System.err.println("DebeziumJsonl: engine failed: " + message);
                  }
                  engineDone.countDown();
                  writer.done.countDown();
                })
            .build();

    ExecutorService executor = Executors.newSingleThreadExecutor();
    AtomicBoolean closed = new AtomicBoolean(false);
    Runnable close =
        () -> {
          if (closed.compareAndSet(false, true)) {
            try {
              engine.close();
              engineDone.await(60, TimeUnit.SECONDS);
            } catch (IOException | InterruptedException e) {
              System.err.println("DebeziumJsonl: close: " + e);
            }
            executor.shutdown();
            writer.flush();
          }
        };
    // SIGTERM runs the shutdown hooks: the engine closes and commits its offsets.
    Runtime.getRuntime().addShutdownHook(new Thread(close, "debezium-jsonl-shutdown"));
    executor.execute(engine);
    writer.done.await();
    close.run();
    if (failed.get()) {
      if (failure.get() != null) {
        failure.get().printStackTrace();
      }
      return 1;
    }
    System.err.println("DebeziumJsonl: stopped after " + writer.count.get() + " records");
    return 0;
  }

  /** Writes records as JSON lines, and counts down {@code done} after the last one wanted. */
  private static final class Writer {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private final OutputStream sink;
    private final JsonConverter keyConverter;
    private final JsonConverter valueConverter;
    private final long max;
    final AtomicLong count = new AtomicLong();
    final CountDownLatch done = new CountDownLatch(1);

    Writer(OutputStream sink, JsonConverter keyConverter, JsonConverter valueConverter, long max) {
      this.sink = sink;
      this.keyConverter = keyConverter;
      this.valueConverter = valueConverter;
      this.max = max;
    }

    /** Writes one record; false once MAX_RECORDS were written (the record is not written). */
    synchronized boolean write(SourceRecord record) {
      if (max > 0 && count.get() >= max) {
        return false;
      }
      byte[] key = keyConverter.fromConnectData(record.topic(), record.keySchema(), record.key());
      byte[] value =
          valueConverter.fromConnectData(record.topic(), record.valueSchema(), record.value());
      try {
        sink.write("{\"topic\":".getBytes(StandardCharsets.UTF_8));
        sink.write(MAPPER.writeValueAsBytes(record.topic()));
        sink.write(",\"key\":".getBytes(StandardCharsets.UTF_8));
        sink.write(key == null ? "null".getBytes(StandardCharsets.UTF_8) : key);
        sink.write(",\"value\":".getBytes(StandardCharsets.UTF_8));
        sink.write(value == null ? "null".getBytes(StandardCharsets.UTF_8) : value);
        sink.write("}\n".getBytes(StandardCharsets.UTF_8));
        sink.flush();
      } catch (IOException e) {
        throw new IllegalStateException("DebeziumJsonl: cannot write a record", e);
      }
      if (max > 0 && count.incrementAndGet() >= max) {
        done.countDown();
      } else if (max <= 0) {
        count.incrementAndGet();
      }
      return true;
    }

    synchronized void flush() {
      try {
        sink.flush();
      } catch (IOException e) {
        System.err.println("DebeziumJsonl: flush: " + e);
      }
    }
  }
}
