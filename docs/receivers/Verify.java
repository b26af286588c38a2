// A webhook receiver that verifies the relay's Standard Webhooks signatures
// (docs/receiving-webhooks.md), with the JDK only (Java 11+: java Verify.java).
// It listens on 127.0.0.1:$PORT, verifies each POST with $WEBHOOK_SECRET
// ("whsec_..."), prints "verified <webhook-id>" or "rejected <webhook-id>:
// <why>" and answers 204 or 400.
import com.sun.net.httpserver.Headers;
import com.sun.net.httpserver.HttpServer;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Base64;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public class Verify {
    // verify throws unless the request is signed with secret. body: the raw bytes.
    static void verify(String secret, Headers h, byte[] body, long nowSeconds) throws Exception {
        String id = h.getFirst("webhook-id"), ts = h.getFirst("webhook-timestamp");
        if (id == null || ts == null || !ts.matches("\\d+")) throw new Exception("missing webhook-id or bad webhook-timestamp");
        if (Math.abs(nowSeconds - Long.parseLong(ts)) > 5 * 60) throw new Exception("webhook-timestamp is more than 5 minutes off: possible replay");
        byte[] key = Base64.getDecoder().decode(secret.replaceFirst("^whsec_", ""));
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(key, "HmacSHA256"));
        mac.update((id + "." + ts + ".").getBytes(StandardCharsets.UTF_8));
        byte[] want = mac.doFinal(body);
        String sigs = h.getFirst("webhook-signature");
        for (String sig : (sigs == null ? "" : sigs).split(" ")) { // "v1,<base64> v1,<base64>"
            if (sig.startsWith("v1,") && MessageDigest.isEqual(Base64.getDecoder().decode(sig.substring(3)), want)) return;
        }
        throw new Exception("no valid signature");
    }

    public static void main(String[] args) throws Exception {
        String secret = System.getenv("WEBHOOK_SECRET");
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(System.getenv("PORT"))), 0);
        server.createContext("/", ex -> {
            byte[] body = ex.getRequestBody().readAllBytes(); // raw, before parsing
            String id = ex.getRequestHeaders().getFirst("webhook-id");
            int status = 204;
            try {
                verify(secret, ex.getRequestHeaders(), body, System.currentTimeMillis() / 1000);
                // Store the event, keyed by webhook-id (a repeat is answered 2xx and not acted on again).
                System.out.println("verified " + id);
            } catch (Exception e) {
                System.out.println("rejected " + id + ": " + e.getMessage());
                status = 400;
            }
            System.out.flush();
            ex.sendResponseHeaders(status, -1);
            ex.close();
        });
        server.start();
    }
}
