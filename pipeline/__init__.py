"""The build pipeline behind build.py, one module per stage, in the order they run:

    variants     resolve the request against images/variants.toml (the one place with versions)
    render       Dockerfile.cu<XYZ> (one per CUDA line) and images/expect/<variant>.json from images/
    lock         the hash-locked requirements, one file per image layer (build.py lock)
    build_image  the wheel index's reach checked, then the BuildKit build, untagged (--iidfile), streamed
    validate     named stages, cheapest first: labels, spec and size; hygiene scan;
                 SBOM and audit (pipeline/validation/); then the image's own `proof`
    report       report.json and its HTML page (html_report)
    labels       stamp what only validation knows on a config-only child, layers checked
    tags         tags from what the validated image reports, checked against the pins
    push         each tag re-checked before its push (zstd_push: the zstd form; registry: the
                 registry's HTTP API, the SBOM beside the image)
    attest       with a signing key: the signed statements about each pushed digest, attached
                 beside it (statements: what they say; signing: keys and DSSE; referrers:
                 the registry side), before any moving tag moves
    run          the stages in that order, for one BuildConfig
    matrix       run for every line this host can build, one after another (build.py matrix)
    listing      what `build.py list` prints: the table, the README's Markdown, CI's JSON
    verify       `build.py verify`: a pushed image's statements checked, one screen

Helpers: containers (the one way to run a program in a container of an image),
hostprocs (the one way to run a program on the host: a deadline from one table, the whole
process tree stopped; the one place Ctrl-C becomes Interrupted), docker_env (the daemon
and the BuildKit CLI), errors (typed errors with exit codes).
"""
