from gpuplan.schemas import NAMES, folder

print(folder())
for name in NAMES:
    print(f"  {name}.schema.json")
