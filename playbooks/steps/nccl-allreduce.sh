# A short NCCL all-reduce across every GPU of this machine (NVIDIA/nccl-tests).
export PATH=$cuda_home/bin:$PATH
tmp=$(mktemp -d)
git clone --depth 1 https://github.com/NVIDIA/nccl-tests "$tmp/nccl-tests" > /dev/null
make -C "$tmp/nccl-tests" CUDA_HOME="$cuda_home" > "$tmp/make.log"
"$tmp/nccl-tests/build/all_reduce_perf" -b 8M -e 128M -f 2 -g "$(nvidia-smi -L | wc -l)"
rm -rf "$tmp"
