# Catalog data package (data files only).
