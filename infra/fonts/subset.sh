#!/usr/bin/env bash
# Makes shared/fonts/DejaVuSans-cards.ttf, the font of the open-time cards: DejaVu Sans as
# matplotlib's wheel ships it, cut by fontTools' pyftsubset to the scripts the cards draw
# (Latin with its extensions, Greek, Cyrillic, Hebrew), without hinting or layout tables (the
# rasteriser reads outlines, advances and cmap only). Everything from PyPI, pinned, in a
# throwaway venv under /tmp; the output is byte-for-byte the committed file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MATPLOTLIB=3.11.2
FONTTOOLS=4.68.0
WORK="$(mktemp -d /tmp/mailflow-fonts.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q --disable-pip-version-check "fonttools==$FONTTOOLS"
# One platform's wheel, whatever the machine: the fonts are the same in every wheel.
"$WORK/venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary :all: \
  --platform manylinux2014_x86_64 --python-version 3.11 -d "$WORK" "matplotlib==$MATPLOTLIB"
"$WORK/venv/bin/python" - "$WORK" <<'PY'
import glob, sys, zipfile
work = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(f"{work}/matplotlib-*.whl")[0])
for name in ("DejaVuSans.ttf", "LICENSE_DEJAVU"):
    with open(f"{work}/{name}", "wb") as out:
        out.write(wheel.read(f"matplotlib/mpl-data/fonts/ttf/{name}"))
PY

# Latin (Basic, Latin-1, Extended-A/B, IPA, Additional), spacing and combining marks, Greek
# (and Extended), Cyrillic (and Supplement), Hebrew (letters, points, presentation forms),
# punctuation, currency signs, letterlike symbols.
UNICODES="U+0020-007E,U+00A0-024F,U+0250-02FF,U+0300-036F,U+0370-03FF,U+0400-052F"
UNICODES+=",U+0590-05FF,U+1E00-1EFF,U+1F00-1FFF,U+2000-206F,U+20A0-20CF,U+2100-214F"
UNICODES+=",U+FB1D-FB4F,U+FFFD"
"$WORK/venv/bin/pyftsubset" "$WORK/DejaVuSans.ttf" \
  --unicodes="$UNICODES" \
  --no-hinting --layout-features='' --drop-tables+=GSUB,GPOS,GDEF,kern,FFTM \
  --name-IDs='0,1,2,3,4,5,6,13,14' --no-glyph-names --notdef-outline \
  --output-file="$ROOT/shared/fonts/DejaVuSans-cards.ttf"
cp "$WORK/LICENSE_DEJAVU" "$ROOT/shared/fonts/LICENSE_DEJAVU"
ls -l "$ROOT/shared/fonts/"
