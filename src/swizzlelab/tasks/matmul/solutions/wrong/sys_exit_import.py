# exploit: calls sys.exit(0) at import | gpu: rejected | cpu: rejected
import sys

sys.exit(0)


def custom_kernel(data):
    return data["out"]
