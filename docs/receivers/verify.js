// A webhook receiver that verifies the relay's Standard Webhooks signatures
// (docs/receiving-webhooks.md), with Node's standard library only. It listens
// on 127.0.0.1:$PORT, verifies each POST with $WEBHOOK_SECRET ("whsec_..."),
// prints "verified <webhook-id>" or "rejected <webhook-id>: <why>" and
// answers 204 or 400.
"use strict";
const crypto = require("node:crypto");
const http = require("node:http");

// verify throws unless the request is signed with secret. body: the raw bytes (a Buffer).
function verify(secret, headers, body, now = Date.now() / 1000) {
  const id = headers["webhook-id"];
  const ts = headers["webhook-timestamp"] || "";
  if (!id || !/^\d+$/.test(ts)) throw new Error("missing webhook-id or bad webhook-timestamp");
  if (Math.abs(now - Number(ts)) > 5 * 60) throw new Error("webhook-timestamp is more than 5 minutes off: possible replay");
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const want = crypto.createHmac("sha256", key).update(`${id}.${ts}.`).update(body).digest();
  for (const sig of (headers["webhook-signature"] || "").split(" ")) { // "v1,<base64> v1,<base64>"
    const [version, b64] = sig.split(",");
    const got = Buffer.from(b64 || "", "base64");
    if (version === "v1" && got.length === want.length && crypto.timingSafeEqual(got, want)) return;
  }
  throw new Error("no valid signature");
}

http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks); // raw, before parsing
    const id = req.headers["webhook-id"];
    try {
      verify(process.env.WEBHOOK_SECRET, req.headers, body);
    } catch (e) {
      console.log(`rejected ${id}: ${e.message}`);
      res.writeHead(400).end();
      return;
    }
    // Store the event, keyed by webhook-id (a repeat is answered 2xx and not acted on again).
    console.log(`verified ${id}`);
    res.writeHead(204).end();
  });
}).listen(Number(process.env.PORT), "127.0.0.1");
