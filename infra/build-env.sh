# Sourced by the scripts that build (test.sh, test-area.sh, soak.sh, sam-local.sh): the one way they build, so
# that they share every artifact in target/ (a different wrapper would rebuild the workspace).
# clippy-driver wraps rustc for the workspace's own crates, as `cargo clippy` does, so the one
# debug build also lints, warnings as errors, and the dependencies are compiled once.
clippy_driver="${RUSTC_WORKSPACE_WRAPPER:-$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)}"
if [[ ! -x "$clippy_driver" ]]; then
  echo "clippy-driver not found: install clippy (rustup component add clippy)" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver" CLIPPY_ARGS="-Dwarnings"
# CI builds from nothing once: incremental compilation only writes caches nobody reads there.
if [[ ${CI:-} == true ]]; then
  export CARGO_INCREMENTAL=0
fi
