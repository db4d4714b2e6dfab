"""Prints what ran, passed, skipped and failed per backend from pytest's JUnit XML, so the
conformance counts of TierStorage (local, MinIO) and FileStorage can be compared."""

import sys
import xml.etree.ElementTree as ET

BACKENDS = [
    ("TierStorage, MinIO", ("TierStorageMinioTests", "TierZODBMinioTests")),
    ("TierStorage, local directory", ("TierStorageTests", "TierZODBTests")),
    ("FileStorage (reference)", ("FileStorageReference", "FileStorageZODBTests")),
]


def main(path):
    counts = {name: [0, 0, 0, 0] for name, _ in BACKENDS}
    for case in ET.parse(path).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        for name, classes in BACKENDS:
            if cls in classes:
                c = counts[name]
                c[0] += 1
                if case.find("skipped") is not None:
                    c[2] += 1
                elif case.find("failure") is not None or case.find("error") is not None:
                    c[3] += 1
                else:
                    c[1] += 1
                break
    print("%-30s %5s %7s %8s %7s" % ("backend", "ran", "passed", "skipped", "failed"))
    for name, _ in BACKENDS:
        print("%-30s %5d %7d %8d %7d" % (name, *counts[name]))


if __name__ == "__main__":
    main(sys.argv[1])
