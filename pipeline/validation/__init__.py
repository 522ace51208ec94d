"""What only validation uses: size, hygiene scan, SBOM, audit and its advisories; gate.py runs them as stages."""
