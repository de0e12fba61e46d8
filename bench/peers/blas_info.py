#!/usr/bin/python3
"""blas_info.py - prints one line naming the BLAS library torch really uses at run time.

torch.__config__.show() of Debian's python3-torch says only BLAS_INFO=generic (it links
libblas.so.3, which the alternatives system resolves); so run a float32 matmul and read the
BLAS shared object mapped into this process from /proc/self/maps.
Output, e.g.: "torch 1.13.0a0 BLAS_INFO=generic -> libopenblasp-r0.3.21.so (openblas-pthread)"
"""
import os
import re

import torch


def main():
    a = torch.ones(64, 64)
    (a @ a).sum().item()
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    info = m.group(1) if m else "?"
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            base = os.path.basename(path)
            if ("blas" in base.lower() or "mkl" in base.lower()) and path not in libs:
                libs.append(path)
    names = ["%s (%s)" % (os.path.basename(p), os.path.basename(os.path.dirname(p)))
             for p in libs]
    print("torch %s BLAS_INFO=%s -> %s" % (torch.__version__, info,
                                            ", ".join(names) or "no BLAS mapped"))


if __name__ == "__main__":
    main()
