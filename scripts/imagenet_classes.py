"""Writes ``models/data/imagenet_classes.tsv``: the 1000 ImageNet-1k classes the labels
stage's classifier scores, each with a readable name and the broader kinds it belongs to.

The class order is that of the classifier's outputs (its WordNet ids sorted); the names and
the kinds come from WordNet 3.0 (Debian's ``wordnet-base``: its licence allows copying with
its notice, kept in the file's header): a class belongs to every kind in ``KINDS`` that is
among its hypernyms. Run it again after changing ``KINDS``::

    apt-get install wordnet-base
    pip download --no-deps timm==1.0.31 -d /tmp/timm   # only for its list of the 1000 ids
    python scripts/imagenet_classes.py /tmp/timm/timm-1.0.31-py3-none-any.whl
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

#: WordNet's nouns (``WORDNET_NOUNS`` for a copy unpacked elsewhere).
WORDNET = Path(os.environ.get("WORDNET_NOUNS", "/usr/share/wordnet/data.noun"))
OUT = Path(__file__).resolve().parent.parent / "models" / "data" / "imagenet_classes.tsv"
SYNSETS = "timm/data/_info/imagenet_synsets.txt"

#: The broader kinds a label is also given (WordNet noun synset -> the name search finds),
#: from the most to the least specific, so that "hare", "wood rabbit" and "Angora" are also
#: "rabbit" and "animal".
KINDS = {
    "n02084071": "dog",
    "n02121808": "cat",  # domestic cat
    "n02127808": "big cat",
    "n02323449": "rabbit",  # leporid: rabbits and hares
    "n02374451": "horse",
    "n02370806": "hoofed animal",
    "n02131653": "bear",
    "n02469914": "primate",
    "n02329401": "rodent",
    "n01503061": "bird",
    "n02512053": "fish",
    "n01661091": "reptile",
    "n01627424": "amphibian",
    "n02159955": "insect",
    "n01769347": "spider",  # arachnids
    "n02062017": "sea animal",  # aquatic mammal
    "n00015388": "animal",
    "n00007846": "person",
    "n02958343": "car",
    "n04490091": "truck",
    "n02834778": "bicycle",
    "n03790512": "motorcycle",
    "n04468005": "train",
    "n04530566": "boat",
    "n02686568": "aircraft",
    "n04524313": "vehicle",
    "n03800933": "musical instrument",
    "n03051540": "clothing",
    "n03405725": "furniture",
    "n02913152": "building",
    "n03082979": "computer",
    "n03278248": "electronic equipment",
    "n04451818": "tool",
    "n04285146": "sports equipment",
    "n07707451": "vegetable",
    "n13134947": "fruit",
    "n00021265": "food",
    "n11669921": "flower",
    "n12992868": "mushroom",
    "n09287968": "landscape",  # geological formation
}


def _read_wordnet() -> tuple[dict[str, str], dict[str, list[str]]]:
    names: dict[str, str] = {}
    parents: dict[str, list[str]] = {}
    for line in WORDNET.read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):
            continue  # the licence header
        fields = line.split(" | ")[0].split()
        wnid = "n" + fields[0]
        count = int(fields[3], 16)
        words = fields[4 : 4 + 2 * count : 2]
        names[wnid] = words[0].replace("_", " ")
        rest = fields[4 + 2 * count :]
        pointers = [rest[1 + 4 * i : 5 + 4 * i] for i in range(int(rest[0]))]
        parents[wnid] = ["n" + p[1] for p in pointers if p[0] in ("@", "@i") and p[2] == "n"]
    return names, parents


def _ancestors(wnid: str, parents: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [wnid]
    while todo:
        for parent in parents.get(todo.pop(), []):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def main(timm_wheel: str) -> None:
    with zipfile.ZipFile(timm_wheel) as wheel:
        wnids = wheel.read(SYNSETS).decode().split()
    if len(wnids) != 1000 or wnids != sorted(wnids):
        raise SystemExit(f"{SYNSETS}: expected the 1000 ImageNet-1k ids in sorted order")
    names, parents = _read_wordnet()
    header = [
        "# The 1000 ImageNet-1k classes: index, WordNet id, name, broader kinds.",
        "# Written by scripts/imagenet_classes.py from WordNet 3.0, whose licence asks that",
        "# this notice be kept: WordNet 3.0 Copyright 2006 by Princeton University.",
        "# All rights reserved. (The full licence: https://wordnet.princeton.edu/license-and-commercial-use)",
    ]
    rows = []
    for index, wnid in enumerate(wnids):
        above = _ancestors(wnid, parents) | {wnid}
        kinds = [kind for synset, kind in KINDS.items() if synset in above]
        rows.append(f"{index}\t{wnid}\t{names[wnid]}\t{','.join(kinds)}")
    OUT.write_text("\n".join([*header, *rows]) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(rows)} classes)")


if __name__ == "__main__":
    main(sys.argv[1])
