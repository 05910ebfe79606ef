# Playbook data package (data files only).
