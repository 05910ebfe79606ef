# OpenMPI from source with CUDA support: the distro package is not CUDA-aware (report B).
series=${openmpi_version%.*}
tmp=$(mktemp -d)
curl -fsSL "https://download.open-mpi.org/release/open-mpi/v$series/openmpi-$openmpi_version.tar.bz2" -o "$tmp/openmpi.tar.bz2"
tar -C "$tmp" -xf "$tmp/openmpi.tar.bz2"
cd "$tmp/openmpi-$openmpi_version"
./configure --prefix="$root$openmpi_prefix" --with-cuda="$cuda_home" > "$tmp/configure.log"
make -j"$(nproc)" > "$tmp/make.log"
make install > "$tmp/install.log"
ldconfig
cd /; rm -rf "$tmp"
