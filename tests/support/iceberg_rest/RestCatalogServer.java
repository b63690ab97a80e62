/*
 * An Iceberg REST catalog server for the tests: Iceberg's own request handlers
 * (org.apache.iceberg.rest.CatalogHandlers, what Iceberg's REST fixture and Polaris-like
 * servers run) over a JdbcCatalog on SQLite, tables' metadata on S3 (MinIO) through
 * S3FileIO, served by the JDK's HTTP server on 127.0.0.1. It routes the REST spec's paths
 * a table client uses (config, namespaces, tables: create, load, commit, drop, rename)
 * and asks every request for the bearer token in ICEBERG_REST_TOKEN, as a deployed
 * catalog asks for its credential.
 *
 * Arguments: port, SQLite file, warehouse (s3://bucket/prefix), S3 endpoint. AWS keys
 * from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). In Iceberg's package
 * only to use its REST JSON mapper (RESTObjectMapper is package-private).
 */

package org.apache.iceberg.rest;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.Executors;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ErrorResponse;

public class RestCatalogServer {
  private static Catalog catalog;
  private static String token;

  public static void main(String[] args) throws IOException {
    int port = Integer.parseInt(args[0]);
    token = System.getenv("ICEBERG_REST_TOKEN");
    if (token == null || token.isEmpty()) {
      throw new IllegalStateException("ICEBERG_REST_TOKEN is not set");
    }
    catalog = CatalogUtil.loadCatalog("org.apache.iceberg.jdbc.JdbcCatalog", "rest_backend",
        Map.of("uri", "jdbc:sqlite:" + args[1], "jdbc.schema-version", "V1",
            "warehouse", args[2], "io-impl", "org.apache.iceberg.aws.s3.S3FileIO",
            "s3.endpoint", args[3], "s3.path-style-access", "true",
            "client.region", "us-east-1"), null);
    HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 64);
    server.setExecutor(Executors.newFixedThreadPool(8));
    server.createContext("/", RestCatalogServer::handle);
    server.start();
    System.out.println("Iceberg REST catalog on 127.0.0.1:" + port);
  }

  private static void handle(HttpExchange exchange) throws IOException {
    try {
      if (!("Bearer " + token).equals(exchange.getRequestHeaders().getFirst("Authorization"))) {
        error(exchange, 401, "NotAuthorizedException", "a bearer token is required");
        return;
      }
      Object response = route(exchange.getRequestMethod(),
          exchange.getRequestURI().getRawPath(), exchange.getRequestBody().readAllBytes());
      if (response == null) {
        exchange.sendResponseHeaders(204, -1);
      } else {
        send(exchange, 200, RESTObjectMapper.mapper().writeValueAsBytes(response));
      }
    } catch (NoSuchTableException | NoSuchNamespaceException e) {
      error(exchange, 404, e.getClass().getSimpleName(), e.getMessage());
    } catch (AlreadyExistsException | CommitFailedException | NamespaceNotEmptyException e) {
      error(exchange, 409, e.getClass().getSimpleName(), e.getMessage());
    } catch (ValidationException | IllegalArgumentException e) {
      error(exchange, 400, e.getClass().getSimpleName(), e.getMessage());
    } catch (RuntimeException e) {
      e.printStackTrace();
      error(exchange, 500, e.getClass().getSimpleName(), String.valueOf(e.getMessage()));
    } finally {
      exchange.close();
    }
  }

  /** The handler's response of one request (null: no content). */
  private static Object route(String method, String path, byte[] body) throws IOException {
    String[] p = Arrays.stream(path.replaceFirst("^/v1/?", "").split("/"))
        .map(s -> URLDecoder.decode(s, StandardCharsets.UTF_8)).toArray(String[]::new);
    SupportsNamespaces namespaces = (SupportsNamespaces) catalog;
    if (path.equals("/v1/config") && method.equals("GET")) {
      return Map.of("defaults", Map.of(), "overrides", Map.of());
    }
    if (p[0].equals("tables") && p.length == 2 && p[1].equals("rename") && method.equals("POST")) {
      CatalogHandlers.renameTable(catalog, read(body, RenameTableRequest.class));
      return null;
    }
    if (!p[0].equals("namespaces")) {
      throw new NoSuchNamespaceException("no route %s %s", method, path);
    }
    if (p.length == 1) {
      if (method.equals("GET")) {
        return CatalogHandlers.listNamespaces(namespaces, Namespace.empty());
      }
      return CatalogHandlers.createNamespace(namespaces, read(body, CreateNamespaceRequest.class));
    }
    Namespace namespace = Namespace.of(p[1].split("\u001f"));  // the spec's separator
    if (p.length == 2) {
      switch (method) {
        case "HEAD": CatalogHandlers.namespaceExists(namespaces, namespace); return null;
        case "DELETE": CatalogHandlers.dropNamespace(namespaces, namespace); return null;
        default: return CatalogHandlers.loadNamespace(namespaces, namespace);
      }
    }
    if (p.length == 3 && p[2].equals("tables")) {
      if (method.equals("GET")) {
        return CatalogHandlers.listTables(catalog, namespace);
      }
      CreateTableRequest request = read(body, CreateTableRequest.class);
      return request.stageCreate()
          ? CatalogHandlers.stageTableCreate(catalog, namespace, request)
          : CatalogHandlers.createTable(catalog, namespace, request);
    }
    if (p.length == 4 && p[2].equals("tables")) {
      TableIdentifier table = TableIdentifier.of(namespace, p[3]);
      switch (method) {
        case "HEAD": CatalogHandlers.tableExists(catalog, table); return null;
        case "DELETE": CatalogHandlers.dropTable(catalog, table); return null;
        case "POST":
          return CatalogHandlers.updateTable(catalog, table, read(body, UpdateTableRequest.class));
        default:
          return CatalogHandlers.loadTable(catalog, table,
              RESTCatalogProperties.SnapshotMode.ALL);
      }
    }
    throw new NoSuchNamespaceException("no route %s %s", method, path);
  }

  private static <T> T read(byte[] body, Class<T> type) throws IOException {
    return RESTObjectMapper.mapper().readValue(body, type);
  }

  private static void error(HttpExchange exchange, int code, String type, String message)
      throws IOException {
    ErrorResponse error = ErrorResponse.builder().responseCode(code).withType(type)
        .withMessage(message).build();
    send(exchange, code, RESTObjectMapper.mapper().writeValueAsBytes(error));
  }

  private static void send(HttpExchange exchange, int code, byte[] body) throws IOException {
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    exchange.sendResponseHeaders(code, body.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(body);
    }
  }
}
