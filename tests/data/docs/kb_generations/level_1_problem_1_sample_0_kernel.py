I cannot write this kernel.
