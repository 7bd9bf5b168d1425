# samples/tiny/bench_env.sh: what the measuring scripts here share, sourced
# from the repository root with the default output folder as its argument:
# builds first unless SKIP_BUILD or PARAPLAN is set, sets $paraplan
# (PARAPLAN, else build/'s) and $out (OUT, else the argument; created), and
# lets mpirun run as root.
if [ -z "${SKIP_BUILD:-}" ] && [ -z "${PARAPLAN:-}" ]; then
  bash scripts/install_dependencies.sh
  bash scripts/build.sh
fi
paraplan=${PARAPLAN:-build/launcher/paraplan}
out=${OUT:-$1}
mkdir -p "$out"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
