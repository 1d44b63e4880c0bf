"""Task `histogram`: per-channel 256-bin histograms of a uint8 [rows, channels] matrix, counts as int32.

Files: task.yml (cases), reference.py (inputs, reference, check, torch baseline), kernel.py (Triton kernel).
"""
