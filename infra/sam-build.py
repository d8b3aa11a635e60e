"""Lays out already-built function binaries as `sam build` does, for `sam local invoke`.

`sam build` (BuildMethod rust-cargolambda) cross-compiles every function with cargo-lambda
into .aws-sam/build/<FunctionId>/bootstrap and writes a template whose CodeUri points there.
This does the same with binaries cargo already built for this machine (infra/sam-local.sh
builds them), so a local run costs no second build; the template is otherwise unchanged.
Usage: sam-build.py TEMPLATE BIN_DIR OUT_DIR
"""
import os
import shutil
import sys

from samcli.yamlhelper import yaml_dump, yaml_parse


def main():
    template_path, bin_dir, out_dir = sys.argv[1:4]
    with open(template_path, encoding="utf-8") as f:
        template = yaml_parse(f.read())
    os.makedirs(out_dir, exist_ok=True)
    for name, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        binary = resource.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
        if not binary:
            sys.exit(f"sam-build: {name} has no Metadata.BuildProperties.Binary")
        source = os.path.join(bin_dir, binary)
        if not os.path.isfile(source):
            sys.exit(f"sam-build: {source} is missing: build it first (cargo build -p {binary})")
        target_dir = os.path.join(out_dir, name)
        os.makedirs(target_dir, exist_ok=True)
        bootstrap = os.path.join(target_dir, "bootstrap")
        if os.path.exists(bootstrap):
            os.remove(bootstrap)
        try:  # a hard link costs nothing; a copy when the build lives on another filesystem
            os.link(source, bootstrap)
        except OSError:
            shutil.copy2(source, bootstrap)
        resource["Properties"]["CodeUri"] = name
        del resource["Metadata"]
    with open(os.path.join(out_dir, "template.yaml"), "w", encoding="utf-8") as f:
        f.write(yaml_dump(template))


if __name__ == "__main__":
    main()
