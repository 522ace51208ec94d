"""The host side of proven-torch: build, validate, tag, push, sign and verify images. Layers, bottom to
top (tests/unit/test_layers.py holds them; docs/architecture.md draws them):

    foundations   errors, variants (the matrix), hostprocs (host commands, deadlines, Ctrl-C),
                  docker_env, cli_text, statements (what signed statements say, both ways)
    parts         lock, render, containers, labels, tags, html_report, attest (the key, in its own
                  signer process), registry (the one registry client), validation.advisories/size
    checks and    validation.audit/hygiene/sbom, build_image, listing, push (docker push),
    transports    zstd_push (skopeo), index_push (docker manifest), referrers (statements in a registry)
    stages        validation.gate (every check, cheapest first), report, target, request, stamp
                  (validate, stamp, tag), publish (push + sign + index, one interface), verify
    runs          line (`build.py build`), all_lines (`build.py matrix`), commands (`render`, `lock`)

Code shared with the image lives in common/; nothing here imports smoke/, ppo_bench/ or rlhf_bench/.
"""
