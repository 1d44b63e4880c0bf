# exploit: never returns from custom_kernel (busy loop) | gpu: rejected | cpu: rejected | slow
def custom_kernel(data):
    while True:
        pass
