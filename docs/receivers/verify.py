"""A webhook receiver that verifies the relay's Standard Webhooks signatures
(docs/receiving-webhooks.md), with the standard library only. It listens on
127.0.0.1:$PORT, verifies each POST with $WEBHOOK_SECRET ("whsec_..."),
prints "verified <webhook-id>" or "rejected <webhook-id>: <why>" and answers
204 or 400."""
import base64
import hashlib
import hmac
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def verify(secret, headers, body, now=None):
    """Raise ValueError unless the request is signed with secret. body: the raw bytes."""
    msg_id = headers.get("webhook-id")
    ts = headers.get("webhook-timestamp", "")
    if not msg_id or not ts.isdigit():
        raise ValueError("missing webhook-id or bad webhook-timestamp")
    if abs((now or time.time()) - int(ts)) > 5 * 60:
        raise ValueError("webhook-timestamp is more than 5 minutes off: possible replay")
    key = base64.b64decode(secret.removeprefix("whsec_"))
    want = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    for sig in headers.get("webhook-signature", "").split():  # "v1,<base64> v1,<base64>"
        version, _, b64 = sig.partition(",")
        if version == "v1" and hmac.compare_digest(base64.b64decode(b64), want):
            return
    raise ValueError("no valid signature")


_print_lock = threading.Lock()  # requests are served on threads: one line at a time


def report(line):
    with _print_lock:
        print(line, flush=True)


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))  # raw, before parsing
        msg_id = self.headers.get("webhook-id")
        try:
            verify(os.environ["WEBHOOK_SECRET"], self.headers, body)
        except (ValueError, TypeError) as e:
            report(f"rejected {msg_id}: {e}")
            self.send_response(400)
            self.end_headers()
            return
        # Store the event, keyed by webhook-id (a repeat is answered 2xx and not acted on again).
        report(f"verified {msg_id}")
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Receiver).serve_forever()
