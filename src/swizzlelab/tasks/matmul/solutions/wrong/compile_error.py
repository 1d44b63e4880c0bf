# exploit: a submission that does not compile (its code is a syntax error) | gpu: rejected | cpu: rejected
# The broken source is compiled at import, so this file itself stays parseable for tools that read every file.
exec(compile("def custom_kernel(data)\n    return data['out']\n", "compile_error.py", "exec"))
