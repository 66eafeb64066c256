#!/usr/bin/env bash
# Regenerates the sample files in this directory from real tools.
#
#   ./make-samples.sh                   # uses tools already installed
#   INSTALL_PREREQS=1 ./make-samples.sh # first installs the tools (Debian 12, root)
#
# Every sample is made by a real tool (compiler, archiver, encoder, library) or
# copied verbatim from a file shipped in a public package (PyPI / pip); see
# SOURCES.md for the list, the provenance and the expected class of each file.
# Timestamps, keys and random ids inside some outputs (7z, rpm, deb, iso, msi,
# PEM/OpenSSH keys, ...) differ from run to run; everything else is fixed.
#
# Tools used (Debian 12 "bookworm" packages unless noted):
#   gcc binutils(ar) zip unzip xz-utils zstd lz4 bzip2 gzip 7zip/p7zip-full gcab
#   cpio genisoimage wabt(wat2wasm) rpm(rpmbuild) dpkg(dpkg-deb)
#   openjdk-17-jdk(javac, jar) libsmali-java(smali) imagemagick(/usr/bin/convert)
#   libmagickcore-6.q16-6-extra + potrace (ImageMagick's SVG writer traces with potrace)
#   msitools + wixl (wixl) flac vorbis-tools(oggenc) mkvtoolnix(mkvmerge) woff2
#   openssl openssh-client(ssh-keygen) file iconv(libc-bin) python3 (3.11)
#   fonts-dejavu-core (DejaVuSans.ttf, subset with fonttools)
#   PyPI, in a throwaway venv: python-docx openpyxl odfpy fpdf2 fonttools brotli av
#   npm, in a throwaway prefix: esbuild
#   PyPI downloads (files copied verbatim): markupsafe wheels (Mach-O),
#   rarfile sdist (RAR test archives); pip's vendored distlib launcher w32.exe (PE).
set -euo pipefail

OUT="$(cd "$(dirname "$0")" && pwd)"
VENV="${VENV:-/tmp/samples-venv}"
NPM_PREFIX="${NPM_PREFIX:-/tmp/samples-npm}"
CONVERT="${CONVERT:-/usr/bin/convert}"   # the real ImageMagick (not a stand-in earlier on PATH)
PY="$VENV/bin/python"

export TZ=UTC LC_ALL=C.UTF-8
export SOURCE_DATE_EPOCH=1700000000     # 2023-11-14T22:13:20Z, honoured by dpkg-deb, rpmbuild, ...
FIXED_DATE="2023-11-14 22:13:20"

if [[ "${INSTALL_PREREQS:-0}" == 1 ]]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    gcc binutils zip unzip xz-utils zstd lz4 bzip2 gzip p7zip-full gcab cpio \
    genisoimage wabt rpm dpkg openjdk-17-jdk-headless libsmali-java imagemagick \
    libmagickcore-6.q16-6-extra potrace msitools wixl flac vorbis-tools mkvtoolnix \
    woff2 openssl openssh-client file fonts-dejavu-core nodejs npm
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install python-docx openpyxl odfpy fpdf2 fonttools brotli av
  mkdir -p "$NPM_PREFIX" && npm install --prefix "$NPM_PREFIX" --no-audit --no-fund esbuild
fi

WORK="$(mktemp -d /tmp/gatehouse-samples.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
fix_mtime() { touch -h -d "$FIXED_DATE" "$@"; }

###############################################################################
# Fixed source texts
###############################################################################
mkdir -p txt
cat > txt/prose.txt <<'EOF'
The gatehouse stood at the edge of the old town, where the cobbled road
narrowed before the bridge. Every morning the keeper unlocked the heavy
door, swept the threshold and wrote the date in a ledger that nobody else
ever read. Travellers came with carts of apples, bolts of wool and crates of
letters; he looked at each load, asked a question or two, and waved most of
them through. Only once in a long while did he open a crate, and then he was
always glad he had: a café owner from the coast had hidden a naïve little
painting of the harbour between two sacks of flour, a gift for his daughter.
EOF
cat > txt/readme.txt <<'EOF'
This archive is a sample made for the gatehouse content scanner tests.
It contains only small, harmless text files.
EOF
cat > txt/notes.txt <<'EOF'
Meeting notes, Thursday
- review the scanner's handling of archives
- check that text files with odd first bytes are still text
- nothing else to report
EOF
cat > txt/data.csv <<'EOF'
id,name,quantity
1,apples,12
2,wool,3
3,letters,40
EOF
cp txt/prose.txt txt/lorem.txt
fix_mtime txt/*

###############################################################################
# Executables
###############################################################################
cat > hello.c <<'EOF'
#include <stdio.h>
int main(void) { puts("Hello from gatehouse"); return 0; }
EOF
gcc -Os -s -o "$OUT/elf-x86_64" hello.c

cat > greet.c <<'EOF'
int gatehouse_greet(int x) { return x * 2 + 1; }
EOF
gcc -Os -s -shared -fPIC -o "$OUT/elf-x86_64-shared.so" greet.c

# PE: smallest Windows launcher that pip vendors (distlib's w32.exe, 32-bit GUI launcher).
PIP_DISTLIB="$(python3 -c 'import os, pip._vendor.distlib as d; print(os.path.dirname(d.__file__))')"
cp "$PIP_DISTLIB/w32.exe" "$OUT/pe-w32.exe"

# Mach-O: the C extension inside macOS wheels of MarkupSafe (PyPI).
mkdir -p whl/arm whl/uni
python3 -m pip download -q --no-deps --only-binary=:all: --platform macosx_11_0_arm64 \
  --python-version 3.11 -d whl/arm markupsafe==3.0.4
python3 -m pip download -q --no-deps --only-binary=:all: --platform macosx_10_9_universal2 \
  --python-version 3.11 -d whl/uni markupsafe==3.0.2
unzip -q -o -d whl/arm/x whl/arm/*.whl
unzip -q -o -d whl/uni/x whl/uni/*.whl
cp whl/arm/x/markupsafe/_speedups.cpython-311-darwin.so "$OUT/macho-arm64.so"
cp whl/uni/x/markupsafe/_speedups.cpython-311-darwin.so "$OUT/macho-fat-universal2.so"

# WebAssembly
cat > add.wat <<'EOF'
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "hello from gatehouse")
  (func (export "add") (param i32 i32) (result i32)
    local.get 0
    local.get 1
    i32.add))
EOF
wat2wasm -o "$OUT/wasm-module.wasm" add.wat

# Java class + jar
mkdir -p java/classes
cat > java/Hello.java <<'EOF'
public class Hello {
    public static void main(String[] args) {
        System.out.println("Hello from gatehouse");
    }
}
EOF
javac --release 8 -d java/classes java/Hello.java
cp java/classes/Hello.class "$OUT/java-Hello.class"
fix_mtime java/classes/Hello.class
jar --create --date=2023-11-14T22:13:20Z --file "$OUT/jar-hello.jar" \
  --main-class Hello -C java/classes Hello.class

# Android DEX: Debian 12 has no dx/d8 (dalvik-exchange is gone), so the smali
# assembler (libsmali-java) assembles the same program, written in smali.
cat > Hello.smali <<'EOF'
.class public LHello;
.super Ljava/lang/Object;
.source "Hello.java"

.method public static main([Ljava/lang/String;)V
    .registers 2
    sget-object v0, Ljava/lang/System;->out:Ljava/io/PrintStream;
    const-string v1, "Hello from gatehouse"
    invoke-virtual {v0, v1}, Ljava/io/PrintStream;->println(Ljava/lang/String;)V
    return-void
.end method
EOF
smali assemble -o "$OUT/dex-classes.dex" Hello.smali

###############################################################################
# Archives
###############################################################################
rm -f "$OUT"/zip-text.zip "$OUT"/zip-empty.zip
(cd txt && zip -q -X -9 "$OUT/zip-text.zip" readme.txt notes.txt data.csv)
python3 - "$OUT/zip-empty.zip" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w"):
    pass
EOF

# Office documents from real libraries
"$PY" - "$OUT/docx-python-docx.docx" <<'EOF'
import sys, datetime
import docx
d = docx.Document()
d.core_properties.author = "gatehouse"
d.core_properties.created = datetime.datetime(2023, 11, 14, 22, 13, 20)
d.core_properties.modified = datetime.datetime(2023, 11, 14, 22, 13, 20)
d.core_properties.last_modified_by = "gatehouse"
d.add_heading("Gatehouse sample", level=1)
d.add_paragraph("A small Word document made by python-docx for scanner tests.")
d.save(sys.argv[1])
EOF
"$PY" - "$OUT/xlsx-openpyxl.xlsx" <<'EOF'
import sys, datetime
import openpyxl
wb = openpyxl.Workbook()
wb.properties.creator = "gatehouse"
wb.properties.created = datetime.datetime(2023, 11, 14, 22, 13, 20)
wb.properties.modified = datetime.datetime(2023, 11, 14, 22, 13, 20)
ws = wb.active
ws.title = "Goods"
for row in [("id", "name", "quantity"), (1, "apples", 12), (2, "wool", 3), (3, "letters", 40)]:
    ws.append(row)
wb.save(sys.argv[1])
EOF
"$PY" - "$OUT/odt-odfpy.odt" <<'EOF'
import sys
from odf.opendocument import OpenDocumentText
from odf.text import H, P
doc = OpenDocumentText()
doc.text.addElement(H(outlinelevel=1, text="Gatehouse sample"))
doc.text.addElement(P(text="A small OpenDocument text made by odfpy for scanner tests."))
doc.save(sys.argv[1])
EOF

# Single-stream compressors, all of the same prose text
gzip  -9 -n -c txt/lorem.txt > "$OUT/gzip-text.gz"
bzip2 -9    -c txt/lorem.txt > "$OUT/bzip2-text.bz2"
xz    -6    -c txt/lorem.txt > "$OUT/xz-text.xz"
zstd  -q -19 -c txt/lorem.txt > "$OUT/zstd-text.zst"
lz4   -q -9 -c txt/lorem.txt > "$OUT/lz4-frame-text.lz4"     # lz4 CLI writes the frame format by default
rm -f "$OUT/7z-text.7z"
(cd txt && 7z a -bd -bso0 -mx=9 "$OUT/7z-text.7z" readme.txt notes.txt data.csv)

# RAR: no rar/unrar tool on Debian main. Copied verbatim from the test files
# shipped in the rarfile 4.5 sdist on PyPI (made by WinRAR/rar by its author).
mkdir -p rar
python3 -m pip download -q --no-deps --no-binary :all: -d rar rarfile==4.5
tar -xzf rar/rarfile-4.5.tar.gz -C rar
cp rar/rarfile-4.5/test/files/rar3-subdirs.rar "$OUT/rar4-rarfile-rar3-subdirs.rar"
cp rar/rarfile-4.5/test/files/rar5-subdirs.rar "$OUT/rar5-rarfile-rar5-subdirs.rar"

# tar
TAR_OPTS=(--sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner)
mkdir -p tarsrc/gatehouse-sample
cp txt/readme.txt txt/notes.txt tarsrc/gatehouse-sample/
"$CONVERT" -size 8x8 gradient:white-black -strip \
  -define png:exclude-chunks=date,time tarsrc/gatehouse-sample/tiny.png
LONG="tarsrc/gatehouse-sample/a-deliberately-long-directory-name-so-that-gnu-tar-needs-a-longlink-record"
mkdir -p "$LONG"
cp txt/data.csv "$LONG/and-an-equally-long-file-name-inside-it.csv"
find tarsrc -exec touch -h -d "$FIXED_DATE" {} +
tar -C tarsrc "${TAR_OPTS[@]}" --format=ustar -cf "$OUT/tar-ustar.tar" \
  gatehouse-sample/readme.txt gatehouse-sample/notes.txt gatehouse-sample/tiny.png
tar -C tarsrc "${TAR_OPTS[@]}" --format=gnu -cf "$OUT/tar-gnu.tar" gatehouse-sample
tar -C txt "${TAR_OPTS[@]}" --format=ustar -cf "$OUT/tar-text-only.tar" readme.txt notes.txt data.csv
tar -C txt "${TAR_OPTS[@]}" --format=gnu -cf - readme.txt notes.txt data.csv | gzip -9 -n > "$OUT/tar-gz.tar.gz"

# Microsoft cabinet
rm -f "$OUT/cab-gcab.cab"
(cd txt && gcab -c -z -n "$OUT/cab-gcab.cab" readme.txt notes.txt)

# ar: one archive of text members only (the whole file is printable ASCII),
# one static library with an object file and a symbol index.
rm -f "$OUT/ar-text-only.a" "$OUT/ar-static-lib.a"
(cd txt && ar rcD "$OUT/ar-text-only.a" readme.txt notes.txt data.csv)
gcc -Os -c -o greet.o greet.c
ar rcsD "$OUT/ar-static-lib.a" greet.o

# Debian package
mkdir -p deb/DEBIAN deb/usr/share/doc/gatehouse-sample
cat > deb/DEBIAN/control <<'EOF'
Package: gatehouse-sample
Version: 1.0
Architecture: all
Maintainer: Gatehouse Tests <tests@example.invalid>
Description: trivial package for the gatehouse scanner tests
 It installs one text file.
EOF
cp txt/readme.txt deb/usr/share/doc/gatehouse-sample/README
find deb -exec touch -h -d "$FIXED_DATE" {} +
dpkg-deb --root-owner-group -Zxz --build deb "$OUT/deb-trivial.deb" >/dev/null

# RPM package (noarch, temporary _topdir)
mkdir -p rpm/SPECS
cat > rpm/SPECS/gatehouse-sample.spec <<'EOF'
Name:           gatehouse-sample
Version:        1.0
Release:        1
Summary:        Trivial package for the gatehouse scanner tests
License:        MIT
BuildArch:      noarch

%description
It installs one text file.

%install
mkdir -p %{buildroot}/usr/share/doc/gatehouse-sample
echo "This package is a sample for the gatehouse content scanner tests." \
  > %{buildroot}/usr/share/doc/gatehouse-sample/README

%files
/usr/share/doc/gatehouse-sample/README
EOF
rpmbuild --quiet -bb --nodeps \
  --define "_topdir $WORK/rpm" --define "_build_id_links none" \
  --define "_buildhost gatehouse-samples" \
  rpm/SPECS/gatehouse-sample.spec
cp rpm/RPMS/noarch/gatehouse-sample-1.0-1.noarch.rpm "$OUT/rpm-noarch.rpm"

# cpio in the three formats GNU cpio writes
for fmt in newc odc bin; do
  (cd txt && printf '%s\n' readme.txt notes.txt data.csv |
     cpio --quiet --reproducible -o -H "$fmt" > "$OUT/cpio-$fmt.cpio")
done

# ISO 9660 (Rock Ridge, no padding so it stays at ~50 KB)
mkdir -p iso
cp txt/readme.txt iso/
fix_mtime iso/readme.txt
genisoimage -quiet -no-pad -r -V GATEHOUSE -o "$OUT/iso9660.iso" iso

# MS Compound File Binary: an .msi built by wixl (msitools)
cp txt/readme.txt readme.txt
cat > sample.wxs <<'EOF'
<?xml version="1.0" encoding="utf-8"?>
<Wix xmlns="http://schemas.microsoft.com/wix/2006/wi">
  <Product Id="6b1c0a53-7d5e-4f0e-9a55-0c2f1e9d1a01" Name="Gatehouse Sample" Language="1033"
           Version="1.0.0" Manufacturer="Gatehouse" UpgradeCode="6b1c0a53-7d5e-4f0e-9a55-0c2f1e9d1a02">
    <Package InstallerVersion="200" Compressed="yes" Comments="Sample for scanner tests"/>
    <Media Id="1" Cabinet="sample.cab" EmbedCab="yes"/>
    <Directory Id="TARGETDIR" Name="SourceDir">
      <Directory Id="ProgramFilesFolder">
        <Directory Id="INSTALLDIR" Name="GatehouseSample">
          <Component Id="MainComponent" Guid="6b1c0a53-7d5e-4f0e-9a55-0c2f1e9d1a03">
            <File Id="readme" Name="readme.txt" Source="readme.txt"/>
          </Component>
        </Directory>
      </Directory>
    </Directory>
    <Feature Id="Complete" Level="1">
      <ComponentRef Id="MainComponent"/>
    </Feature>
  </Product>
</Wix>
EOF
wixl -o "$OUT/cfb-wixl.msi" sample.wxs

###############################################################################
# Binary, not text: images, documents, media, databases, fonts
###############################################################################
IMG=(-define png:exclude-chunks=date,time +set date:create +set date:modify)
"$CONVERT" -size 16x16 gradient:red-blue -strip "${IMG[@]}" img.png
cp img.png "$OUT/png-16x16.png"
"$CONVERT" img.png -strip -quality 85 "$OUT/jpeg-16x16.jpg"
"$CONVERT" img.png -strip "$OUT/gif-16x16.gif"
"$CONVERT" img.png -strip -quality 80 "$OUT/webp-16x16.webp"
"$CONVERT" img.png -strip "BMP3:$OUT/bmp-16x16.bmp"
"$CONVERT" img.png -strip -compress none "$OUT/tiff-16x16.tif"
"$CONVERT" img.png -strip "$OUT/ico-16x16.ico"

# PDF (Debian's ImageMagick policy forbids writing PDF): fpdf2 from PyPI
"$PY" - "$OUT/pdf-fpdf2.pdf" <<'EOF'
import sys, datetime
from fpdf import FPDF
pdf = FPDF()
pdf.set_creation_date(datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc))
pdf.set_title("Gatehouse sample")
pdf.add_page()
pdf.set_font("helvetica", size=14)
pdf.cell(text="Hello from gatehouse: a one-page PDF made by fpdf2.")
pdf.output(sys.argv[1])
EOF

# WAV: 0.25 s of a 440 Hz sine, 8 kHz, 16-bit mono, with python's wave module
python3 - "$OUT/wav-sine.wav" <<'EOF'
import sys, wave, math, struct
rate = 8000
frames = b"".join(struct.pack("<h", int(12000 * math.sin(2 * math.pi * 440 * i / rate)))
                  for i in range(rate // 4))
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate); w.writeframes(frames)
EOF
flac -s -f -8 -o "$OUT/flac-sine.flac" "$OUT/wav-sine.wav"
oggenc -Q -q 0 --serial 1 -o "$OUT/ogg-vorbis-sine.ogg" "$OUT/wav-sine.wav"
mkvmerge -q --webm --no-date --disable-track-statistics-tags \
  -o "$OUT/webm-vorbis-sine.webm" "$OUT/ogg-vorbis-sine.ogg"

# MP4 (MPEG-4 Part 2 video, 2 frames of 16x16) with PyAV (ffmpeg libraries in its wheel)
"$PY" - img.png "$OUT/mp4-mpeg4-16x16.mp4" <<'EOF'
import sys
from fractions import Fraction
import av
img = next(av.open(sys.argv[1]).decode(video=0))
out = av.open(sys.argv[2], "w", format="mp4")
st = out.add_stream("mpeg4", rate=1)
st.width, st.height, st.pix_fmt = 16, 16, "yuv420p"
st.codec_context.time_base = Fraction(1, 1)
for i in range(2):
    fr = img.reformat(width=16, height=16, format="yuv420p")
    fr.pts, fr.time_base = i, Fraction(1, 1)
    for pkt in st.encode(fr):
        out.mux(pkt)
for pkt in st.encode():
    out.mux(pkt)
out.close()
EOF

# SQLite
rm -f "$OUT/sqlite-db.sqlite"
python3 - "$OUT/sqlite-db.sqlite" <<'EOF'
import sys, sqlite3
con = sqlite3.connect(sys.argv[1])
con.execute("PRAGMA page_size = 1024")
con.execute("CREATE TABLE goods (id INTEGER PRIMARY KEY, name TEXT NOT NULL, quantity INTEGER)")
con.executemany("INSERT INTO goods VALUES (?, ?, ?)", [(1, "apples", 12), (2, "wool", 3), (3, "letters", 40)])
con.commit()
con.execute("VACUUM")
con.close()
EOF

# Fonts: DejaVu Sans subset (fonttools' pyftsubset) as TTF and WOFF, then WOFF2 (woff2_compress)
DEJAVU=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
"$VENV/bin/pyftsubset" "$DEJAVU" --text="Gatehouse sample 0123456789" \
  --output-file="$OUT/font-dejavusans-subset.ttf"
"$VENV/bin/pyftsubset" "$DEJAVU" --text="Gatehouse sample 0123456789" --flavor=woff \
  --output-file="$OUT/font-dejavusans-subset.woff"
cp "$OUT/font-dejavusans-subset.ttf" woff2src.ttf
woff2_compress woff2src.ttf >/dev/null
cp woff2src.woff2 "$OUT/font-dejavusans-subset.woff2"

###############################################################################
# Text (must be accepted as text)
###############################################################################
cp txt/prose.txt "$OUT/text-utf8-prose.txt"
{ printf '\xEF\xBB\xBF'; cat txt/prose.txt; } > "$OUT/text-utf8-bom.txt"
{ printf '\xFF\xFE'; iconv -f UTF-8 -t UTF-16LE txt/prose.txt; } > "$OUT/text-utf16le-bom.txt"
{ printf '\xFE\xFF'; iconv -f UTF-8 -t UTF-16BE txt/prose.txt; } > "$OUT/text-utf16be-bom.txt"

# Latin-1: must NOT be classified as text (bytes 0xE0-0xFF without UTF-8 structure)
cat > latin1-src.txt <<'EOF'
À la fin de l'été, la fête du village réunit élèves, maîtres et grand-mères.
Über den Brücken wehten Fähnchen; im Café gab es Crème brûlée und Käsekuchen.
Señora Muñoz pidió una canción; el niño tocó la guitarra con pasión.
EOF
iconv -f UTF-8 -t ISO-8859-1 latin1-src.txt > "$OUT/latin1-accented.txt"

# SVG: one written by hand, one written by ImageMagick (its SVG coder traces the
# bitmap with potrace; it does NOT embed a base64 PNG), and one with a real PNG
# embedded as a base64 data: URI (assembled here, the PNG made by ImageMagick).
cat > "$OUT/svg-handwritten.svg" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">
  <title>Gatehouse</title>
  <rect x="8" y="20" width="48" height="40" fill="#8a6d3b" stroke="#3b2f1a" stroke-width="2"/>
  <path d="M24 60 V40 a8 8 0 0 1 16 0 V60 Z" fill="#3b2f1a"/>
  <polygon points="4,22 32,4 60,22" fill="#a33"/>
</svg>
EOF
"$CONVERT" -size 32x32 xc:white -fill black -draw "circle 16,16 16,5" -strip circle.png
"$CONVERT" circle.png "$OUT/svg-imagemagick-potrace.svg"
chmod 644 "$OUT/svg-imagemagick-potrace.svg"
{
  printf '<?xml version="1.0" encoding="UTF-8"?>\n'
  printf '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="16" height="16">\n'
  printf '  <image width="16" height="16" xlink:href="data:image/png;base64,%s"/>\n' "$(base64 -w0 img.png)"
  printf '</svg>\n'
} > "$OUT/svg-embedded-png.svg"

# Coloured terminal output (ANSI SGR escape sequences)
cat > app.log <<'EOF'
2023-11-14T22:13:20Z INFO  scanner started
2023-11-14T22:13:21Z WARN  slow upstream: 812 ms
2023-11-14T22:13:22Z INFO  scanned 14 files
2023-11-14T22:13:23Z ERROR upstream closed the connection
2023-11-14T22:13:24Z INFO  retry succeeded
EOF
mkdir -p lsdir/subdir && cp txt/readme.txt lsdir/ && cp "$OUT/elf-x86_64" lsdir/hello
{
  env -u GREP_COLORS -u GREP_COLOR grep --color=always -E 'WARN|ERROR' app.log
  (cd lsdir && env -u LS_COLORS TERM=xterm ls --color=always -1)
} > "$OUT/ansi-colored.log"

# PEM certificate and key (Ed25519, self-signed)
openssl req -x509 -newkey ed25519 -nodes -days 3650 -subj "/CN=gatehouse-sample" \
  -keyout "$OUT/pem-ed25519-key.pem" -out "$OUT/pem-ed25519-cert.pem" 2>/dev/null
chmod 644 "$OUT/pem-ed25519-key.pem"

# OpenSSH key pair
rm -f "$OUT/openssh-ed25519" "$OUT/openssh-ed25519.pub"
ssh-keygen -q -t ed25519 -N '' -C gatehouse-sample -f "$OUT/openssh-ed25519"
chmod 644 "$OUT/openssh-ed25519"

# A real HS256 JWT inside an HTTP request transcript
python3 - "$OUT/jwt-request.txt" <<'EOF'
import sys, json, hmac, hashlib, base64
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
payload = b64(json.dumps({"sub": "gatehouse-sample", "name": "Sample User", "iat": 1700000000},
                         separators=(",", ":")).encode())
sig = b64(hmac.new(b"not-a-real-secret", f"{header}.{payload}".encode(), hashlib.sha256).digest())
with open(sys.argv[1], "w") as f:
    f.write("GET /api/v1/items HTTP/1.1\r\nHost: example.invalid\r\n"
            f"Authorization: Bearer {header}.{payload}.{sig}\r\nAccept: application/json\r\n\r\n")
EOF

# JavaScript bundled by esbuild with an inline (base64 data: URI) source map
mkdir -p js
cat > js/greet.js <<'EOF'
// Greets whoever passes the gate.
export function greet(name) {
  const who = name || "traveller";
  return `Welcome through the gatehouse, ${who}!`;
}
console.log(greet("keeper"));
EOF
(cd js && "$NPM_PREFIX/node_modules/.bin/esbuild" greet.js --bundle --format=esm \
   --sourcemap=inline --log-level=warning --outfile=bundle.js)
cp js/bundle.js "$OUT/js-inline-sourcemap.js"

# Text files that begin with the magic letters of binary formats
printf '%s\n' \
  'MZ is the monogram of Mark Zbikowski, one of the designers of MS-DOS, and it' \
  'still opens every Windows executable. This file is plain text, not a program.' \
  > "$OUT/text-starts-MZ.txt"
printf '%s\n' \
  'PK are the initials of Phil Katz, who wrote PKZIP; every zip archive starts' \
  'with them. This file, however, is only a short note about that fact.' \
  > "$OUT/text-starts-PK.txt"
printf '%s\n' \
  'BZh9 is how a bzip2 stream compressed at level 9 begins: "BZ" for the format,' \
  '"h" for Huffman coding and a digit for the block size. This is just text.' \
  > "$OUT/text-starts-BZh.txt"

# JSON with a long base64 PNG (made by ImageMagick) in a string
"$CONVERT" -size 64x64 gradient:yellow-navy -swirl 120 -strip "${IMG[@]}" json.png
python3 - json.png "$OUT/json-base64-png.json" <<'EOF'
import sys, json, base64
data = base64.b64encode(open(sys.argv[1], "rb").read()).decode()
json.dump({"name": "swirl.png", "mime": "image/png", "width": 64, "height": 64,
           "data": data}, open(sys.argv[2], "w"), indent=2)
open(sys.argv[2], "a").write("\n")
EOF

###############################################################################
# Polyglot: text with a zip archive appended
###############################################################################
cat txt/notes.txt "$OUT/zip-text.zip" > "$OUT/polyglot-text-zip"

###############################################################################
# Checks
###############################################################################
# ar-text-only.a must be entirely printable ASCII (plus newlines).
if LC_ALL=C grep -q -P '[^\x0a\x20-\x7e]' "$OUT/ar-text-only.a"; then
  echo "ar-text-only.a is not pure ASCII" >&2; exit 1
fi
# The Latin-1 sample must not be valid UTF-8; the UTF-8 ones must be.
if iconv -f UTF-8 -t UTF-8 "$OUT/latin1-accented.txt" >/dev/null 2>&1; then
  echo "latin1-accented.txt is valid UTF-8" >&2; exit 1
fi
iconv -f UTF-8 -t UTF-8 "$OUT/text-utf8-prose.txt" >/dev/null
# Size limits: 150 KB per file, 1.5 MB in all.
find "$OUT" -type f -size +150k -printf 'too big: %p\n' | grep . && exit 1
total=$(du -cb "$OUT" --exclude=SOURCES.md --exclude=make-samples.sh | tail -1 | cut -f1)
echo "samples written to $OUT (total ${total} bytes)"
(cd "$OUT" && for f in $(ls | grep -vE '^(SOURCES\.md|make-samples\.sh)$'); do
   printf '%-32s %s\n' "$f" "$(file -b --mime-type "$f")"; done)
