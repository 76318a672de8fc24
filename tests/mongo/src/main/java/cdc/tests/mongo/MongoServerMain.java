package cdc.tests.mongo;

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import java.util.List;
import java.util.concurrent.CountDownLatch;

/**
 * Runs an in-memory MongoDB-protocol server with an oplog (so change streams work) until killed.
 *
 * <p>Usage: {@code MongoServerMain PORT [HOST]}. Prints {@code READY host:port} on stdout once it
 * accepts connections; the test harness waits for that line.
 */
public final class MongoServerMain {

  /**
   * Reports MongoDB 4.4 (wire version 9): current drivers (pymongo 4.x) refuse anything older,
   * and the library's own newest constant, MONGO_5_0, still reports wire version 8.
   */
  private static final MongoVersion REPORTED_VERSION =
      new MongoVersion() {
        @Override
        public List<Integer> getVersionArray() {
          return List.of(4, 4, 0);
        }

        @Override
        public int getWireVersion() {
          return 9;
        }
      };

  private MongoServerMain() {}

  public static void main(String[] args) throws InterruptedException {
    if (args.length < 1) {
      System.err.println("usage: MongoServerMain PORT [HOST]");
      System.exit(2);
    }
    int port = Integer.parseInt(args[0]);
    String host = args.length > 1 ? args[1] : "127.0.0.1";

    ChangeStreamBackend backend = new ChangeStreamBackend();
    backend.version(REPORTED_VERSION);
    MongoServer server = new MongoServer(backend);
    server.enableOplog();
    backend.indexOplogTimestamps();
    server.bind(host, port);

    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  server.shutdownNow();
                  stopped.countDown();
                }));
    System.out.println("READY " + host + ":" + port);
    System.out.flush();
    stopped.await();
  }
}
