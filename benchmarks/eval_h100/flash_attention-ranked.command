python3 -m swizzlelab.cli eval flash_attention --mode ranked --out /tmp/eval --budget-s 2 
