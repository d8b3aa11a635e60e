"""Prints the CloudFormation that the SAM translator makes of template.yaml, offline.

cfn-lint barely checks SAM event properties in template.yaml itself; linting this output
checks them (BatchSize, FunctionResponseTypes, schedule expressions, ...).
Usage: translate-template.py TEMPLATE > OUT.json
"""
import json
import os
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class OfflinePolicyLoader:
    """SAM asks IAM for managed policy ARNs; offline, it builds the ARNs itself."""

    def load(self):
        return {}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        template = yaml_parse(f.read())
    # As after `sam package`: the translator wants code in S3, not a local path.
    for name, resource in template.get("Resources", {}).items():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource.setdefault("Properties", {})["CodeUri"] = f"s3://validation-bucket/{name}.zip"
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    parameters = {"MongoDbUriSecretName": "mailflow/mongodb-uri"}
    out = transform(template, parameters, OfflinePolicyLoader())
    json.dump(out, sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main()
