"""Prints the slowest tests of cargo-nextest JUnit reports: python3 slowest-tests.py N REPORT..."""
import sys
import xml.etree.ElementTree as ET

n, reports = int(sys.argv[1]), sys.argv[2:]
cases = [
    (float(case.get("time", 0)), f"{case.get('classname', '')} {case.get('name', '')}")
    for report in reports
    for case in ET.parse(report).iter("testcase")
]
total = sum(t for t, _ in cases)
print(f"{len(cases)} tests, {total:.0f} s of test time in all; the {min(n, len(cases))} slowest:")
for seconds, name in sorted(cases, reverse=True)[:n]:
    print(f"{seconds:8.1f} s  {name}")
