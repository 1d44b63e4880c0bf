"""The lab: studies that measure swizzlelab on GPUs and CPUs, each in its own folder (README.md here).
A package so that studies, their tests and the checks import shared code by name: python -m benchmarks.<study>.<script>.
"""
