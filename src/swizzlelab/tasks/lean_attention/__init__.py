"""lean_attention task: stream-K decode attention whose 1-D program id is the swizzle site.

See task.yml for the cases and reference.py / kernel.py for the contract functions.
"""
