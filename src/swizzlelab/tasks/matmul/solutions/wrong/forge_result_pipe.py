# exploit: writes a forged 'done' frame with a tiny time to every pipe it can find, then returns without computing | gpu: rejected | cpu: rejected
import json
import os
import struct


def _forge():
    body = json.dumps({"ok": True, "t_ms": 0.001, "tail_ms": 0.0, "returned": "out"}).encode()
    frame = struct.pack(">I", len(body)) + body
    for fd in range(3, 256):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                os.write(fd, frame)
        except OSError:
            pass


def custom_kernel(data):
    _forge()
    return data["out"]
