# Docker's apt repository and engine (docs.docker.com/engine/install/ubuntu).
install -m 0755 -d "$root/etc/apt/keyrings"
curl -fsSL https://download.docker.com/linux/ubuntu/gpg -o "$root/etc/apt/keyrings/docker.asc"
chmod a+r "$root/etc/apt/keyrings/docker.asc"
codename=$(. "$root/etc/os-release" && echo "$VERSION_CODENAME")
echo "deb [arch=$(dpkg --print-architecture) signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/ubuntu $codename stable" \
  > "$root/etc/apt/sources.list.d/docker.list"
apt-get update
apt-get install -y docker-ce docker-ce-cli containerd.io docker-buildx-plugin
