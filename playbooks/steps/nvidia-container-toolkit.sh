# NVIDIA container toolkit repository and package (github.com/NVIDIA/nvidia-container-toolkit install guide).
tmp=$(mktemp -d)
curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey -o "$tmp/gpgkey"
gpg --dearmor --yes -o "$root/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg" "$tmp/gpgkey"
curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list -o "$tmp/list"
sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g' "$tmp/list" \
  > "$root/etc/apt/sources.list.d/nvidia-container-toolkit.list"
rm -rf "$tmp"
apt-get update
apt-get install -y nvidia-container-toolkit
