python3 -m swizzlelab.cli eval lean_attention --mode ranked --out /tmp/eval --budget-s 2 
