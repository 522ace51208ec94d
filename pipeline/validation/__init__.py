"""What only validation uses: the image's size against its budget, the hygiene scan,
the SBOM, the vulnerability audit and the advisory database it reads.

pipeline/validation/gate.py runs them as named stages (then the image's own `proof`).
"""
