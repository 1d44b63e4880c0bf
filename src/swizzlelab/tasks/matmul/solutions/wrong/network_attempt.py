# exploit: tries to reach the network (loopback and outside); computes honestly only if a connection works | gpu: rejected | cpu: rejected
import socket

from swizzlelab.tasks.matmul.kernel import custom_kernel as _kernel


def _reachable():
    for host, port in (("127.0.0.1", 22), ("127.0.0.1", 8000), ("1.1.1.1", 53), ("8.8.8.8", 53)):
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return f"{host}:{port}"
        except OSError as err:
            if isinstance(err, ConnectionRefusedError):
                return f"{host}:{port} (refused: the network is there)"
    return None


def custom_kernel(data):
    where = _reachable()
    if where:
        print("LEAKED:", where)
        return _kernel(data)
    return data["out"].zero_()
