# exploit: a submission that does not compile (syntax error) | gpu: rejected | cpu: rejected
def custom_kernel(data)
    return data["out"]
