"""`python -m swizzlelab.cli`: the same entry point as the `swizzlelab` console script.

Kept so that scripts can run the CLI with a chosen interpreter.
"""

from swizzlelab.cli.main import main

main()
