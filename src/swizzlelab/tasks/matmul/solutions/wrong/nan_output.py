# exploit: writes NaN everywhere | gpu: rejected | cpu: rejected
def custom_kernel(data):
    return data["out"].fill_(float("nan"))
