package cdc.tests.opensearch;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.opensearch.common.settings.Settings;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.transport.Netty4Plugin;

/**
 * Runs a single OpenSearch node in this JVM, HTTP on the given port, until killed.
 *
 * <p>Usage: {@code OpenSearchMain HTTP_PORT HOME_DIR [HOST]}. Prints {@code READY host:port} on
 * stdout once the node has started; the harness then waits for the cluster health to be green.
 *
 * <p>No security plugin (plain HTTP, no users) and no modules but the Netty 4 transport: the
 * analysers of analysis-common and painless scripts are absent, which the sink does not use.
 */
public final class OpenSearchMain {

  private OpenSearchMain() {}

  /** A node whose plugins are classes on the classpath, as OpenSearch's own MockNode does. */
  static final class ClasspathNode extends Node {
    ClasspathNode(Settings settings, Path configDir) {
      super(
          InternalSettingsPreparer.prepareEnvironment(
              settings, Map.of(), configDir, () -> "cdc-test"),
          List.of(Netty4Plugin.class),
          true);
    }
  }

  static Settings settings(String host, int httpPort, Path home) {
    return Settings.builder()
        .put("cluster.name", "cdc-test")
        .put("node.name", "cdc-test")
        .put("path.home", home.toString())
        .put("path.data", home.resolve("data").toString())
        .put("path.logs", home.resolve("logs").toString())
        .put("discovery.type", "single-node")
        .put("network.host", host)
        .put("http.port", httpPort)
        // The transport port is bound even for one node; any free one will do.
        .put("transport.port", 0)
        .put("http.type", "netty4")
        .put("transport.type", "netty4")
        // A shared disk over 90% full would block every index; the tests' data is tiny.
        .put("cluster.routing.allocation.disk.threshold_enabled", false)
        // A test machine has two cores: fewer threads start faster and idle quieter.
        .put("node.processors", 1)
        .put("indices.breaker.total.use_real_memory", false)
        .build();
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: OpenSearchMain HTTP_PORT HOME_DIR [HOST]");
      System.exit(2);
    }
    int port = Integer.parseInt(args[0]);
    Path home = Path.of(args[1]).toAbsolutePath();
    String host = args.length > 2 ? args[2] : "127.0.0.1";
    Path config = Files.createDirectories(home.resolve("config"));
    Node node = new ClasspathNode(settings(host, port, home), config);
    node.start();
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  try {
                    node.close();
                  } catch (Exception e) {
                    e.printStackTrace();
                  }
                  stopped.countDown();
                }));
    System.out.println("READY " + host + ":" + port);
    System.out.flush();
    stopped.await();
  }
}
