# NVIDIA's apt repository for this Ubuntu release (cuda-keyring installs the key and the source).
tmp=$(mktemp -d)
curl -fsSL "$nvidia_repo/cuda-keyring_${cuda_keyring}_all.deb" -o "$tmp/cuda-keyring_${cuda_keyring}_all.deb"
dpkg -i "$tmp/cuda-keyring_${cuda_keyring}_all.deb"
rm -rf "$tmp"
apt-get update
