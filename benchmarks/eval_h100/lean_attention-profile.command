python3 -m swizzlelab.cli eval lean_attention --mode profile --out /tmp/eval --budget-s 2 
