#!/usr/bin/env python3
"""Fits avx512_math.h's kGeluErfCoefficients and prints them: 0.5 erf(a / sqrt 2)
for a in [0, 5.5) as 16 degree-5 polynomials in u = a / (5.5 / 16) - i - 0.5,
each fitted in double on 200 Chebyshev nodes of u in [-0.5, 0.5] by least
squares reweighted toward the largest errors (Lawson's iteration, near
minimax), then rounded to float32. Needs Debian's python3-numpy.

  /usr/bin/python3 kernels/cpu/fit_gelu_erf.py
"""
from math import erf, sqrt

import numpy as np

SPAN, INTERVALS, DEGREE, NODES = 5.5, 16, 5, 200


def main():
    half_erf = np.vectorize(lambda a: 0.5 * erf(a / sqrt(2)))
    u = 0.5 * np.cos(np.pi * (np.arange(NODES) + 0.5) / NODES)
    vander = np.vander(u, DEGREE + 1, increasing=True)
    coefficients = np.zeros((INTERVALS, DEGREE + 1), np.float32)
    for i in range(INTERVALS):
        target = half_erf((i + 0.5 + u) * SPAN / INTERVALS)
        weights = np.ones(NODES)
        for _ in range(30):
            root = np.sqrt(weights)
            c, *_ = np.linalg.lstsq(vander * root[:, None], target * root, rcond=None)
            weights *= np.abs(vander @ c - target) + 1e-30
            weights /= weights.sum()
        coefficients[i] = c
    for d in range(DEGREE + 1):
        print("    {" + ", ".join(f"{float(v):.9g}f" for v in coefficients[:, d]) + "},")


if __name__ == "__main__":
    main()
