# Test worker: connects to the store at MASTER_ADDR:MASTER_PORT as a PyTorch worker would
# (exit 1 when nothing answers there). With "bad-frame" it then sends an unknown command, so
# the store logs a line about this connection.
import os
import socket
import sys

addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
try:
    conn = socket.create_connection((addr, port), timeout=10)
except OSError as e:
    print(f"PROBE FAILED {addr} {port}: {e}", flush=True)
    sys.exit(1)
if len(sys.argv) > 1 and sys.argv[1] == "bad-frame":
    conn.sendall(b"\x00\xce\xf7\x85\x3c\x63")  # TCPStore 2.x handshake, then command 99
    conn.recv(1)  # the server closes the connection
conn.close()
print(f"PROBE REACHED RANK={os.environ['RANK']} MASTER={addr} {port}", flush=True)
