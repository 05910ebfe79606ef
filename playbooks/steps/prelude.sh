# Sourced before every check and action, after the parameters are set.
export DEBIAN_FRONTEND=noninteractive
if [ "$ubuntu_release" = auto ]; then
  ubuntu_release=$(. "$root/etc/os-release" && echo "${VERSION_ID//./}")
fi
cuda_major=${cuda_version%%.*}
cuda_dash=${cuda_version//./-}
cuda_home=/usr/local/cuda-$cuda_version
nvidia_repo=https://developer.download.nvidia.com/compute/cuda/repos/ubuntu$ubuntu_release/$arch
bashrc=$HOME/.bashrc
# installed PKG... : every package is installed (dpkg's view)
installed() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || return 1
  done
}
# same_content FILE TEXT : FILE exists and holds exactly TEXT
same_content() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
# block_at_top FILE MARK TEXT : FILE starts with the marked block holding TEXT
block_text() { printf '# >>> gpuplan %s >>>\n%s\n# <<< gpuplan %s <<<' "$1" "$2" "$1"; }
block_at_top() {
  local want; want=$(block_text "$2" "$3")
  [ -f "$1" ] && [ "$(head -n "$(printf '%s\n' "$want" | wc -l)" "$1")" = "$want" ]
}
# put_block_at_top FILE MARK TEXT : remove any old gpuplan MARK block, then put the new one first
put_block_at_top() {
  local tmp; tmp=$(mktemp)
  mkdir -p "$(dirname "$1")"; touch "$1"
  { block_text "$2" "$3"; echo; sed "/^# >>> gpuplan $2 >>>\$/,/^# <<< gpuplan $2 <<<\$/d" "$1"; } > "$tmp"
  cat "$tmp" > "$1"; rm -f "$tmp"
}
