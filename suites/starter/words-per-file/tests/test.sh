#!/bin/bash
# Verifier for words-per-file: /app/too_short.txt names the essays under 120 words, which were moved into /app/essays/returned
# Checks content with python3 only and always writes /logs/verifier/reward.txt (1 or 0).
mkdir -p /logs/verifier
if python3 - <<'PY'
import sys
from pathlib import Path

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

def read(path):
    p = Path(path)
    if not p.is_file():
        fail(f"{path} does not exist or is not a regular file")
    return p.read_text(errors="replace")

files = {'alice.txt': 'river market a music music garden orchard evening lantern music friend a\nthe river harbour orchard a the lantern friend winter evening harbour stone\nriver market stone road bridge lantern road story river story candle stone\nfriend paper town window garden harbour evening story stone letter lantern town\npaper bridge river paper harbour story market morning market winter bridge quiet\ntown music garden paper stone stone stone valley harbour river winter town\nbridge friend morning bridge evening valley music orchard music morning candle friend\nquiet river market town candle harbour morning music the valley stone morning\nwinter market music valley the evening orchard candle a quiet garden bridge\nriver river market story orchard morning lantern market friend letter candle valley\nroad market stone lantern market valley winter market lantern market a town\na quiet town market harbour letter orchard paper candle evening harbour a\nmarket garden letter market road winter\n', 'bruno.txt': 'winter friend a garden the paper harbour valley market letter candle a\npaper candle evening road a stone harbour winter orchard window friend the\nriver lantern orchard paper paper stone quiet the bridge winter morning valley\nthe the valley friend candle orchard stone market river paper garden friend\ntown paper bridge candle orchard the window orchard lantern quiet a harbour\npaper lantern stone road letter market orchard morning winter town morning harbour\ngarden winter winter harbour bridge music candle paper orchard valley river road\npaper road friend letter music garden paper window road orchard window evening\nwindow morning\n', 'chen.txt': 'stone music river garden window lantern lantern valley river window a harbour\npaper valley river quiet paper harbour town evening a lantern music quiet\nletter bridge road winter paper window story lantern garden harbour winter window\nharbour harbour bridge quiet morning bridge orchard the garden valley candle road\norchard a lantern harbour river lantern winter river friend story garden the\nlantern garden morning morning quiet bridge town the garden harbour road letter\nquiet candle music market evening orchard winter market music bridge harbour town\nharbour orchard bridge river garden window morning town river valley morning quiet\na valley winter bridge market bridge candle candle winter river a candle\nlantern harbour letter market the a candle stone market friend quiet letter\n', 'dana.txt': 'evening market stone market evening evening window winter road paper winter letter\na market letter a town lantern harbour a morning winter winter a\npaper a bridge window quiet paper stone a harbour valley harbour bridge\nmusic lantern orchard valley window orchard bridge market morning music friend bridge\nfriend evening morning valley garden candle valley orchard town harbour harbour evening\ncandle morning harbour stone stone window candle paper morning lantern harbour lantern\nbridge bridge friend friend road evening window quiet friend evening valley lantern\ngarden music a candle window road paper bridge market friend letter town\nwinter music road river music story bridge paper window town music window\nroad town music lantern garden valley window road music evening window\n', 'eli.txt': 'a garden orchard evening road morning garden morning music bridge quiet market\nquiet winter morning story town friend evening road stone harbour market candle\nmorning music window letter quiet stone valley harbour harbour stone town garden\nwinter evening garden lantern lantern stone road road quiet road the evening\nstory harbour the valley window bridge the harbour quiet a lantern morning\nroad road music a morning road window winter river orchard winter road\nmorning quiet the market town window town bridge letter town evening candle\nbridge stone winter winter candle friend letter window a lantern road story\nlantern garden road friend quiet candle market stone paper evening window bridge\nevening the valley candle town evening winter lantern garden stone letter town\ntown valley music river morning a paper a orchard window evening town\npaper story orchard evening window evening orchard quiet candle stone river paper\nharbour garden market garden orchard town river road the garden a river\nriver friend market paper road quiet bridge stone a candle valley bridge\nquiet the lantern window lantern river the winter stone a winter lantern\nwindow evening candle morning market evening letter quiet harbour orchard window candle\nmorning road orchard bridge paper market window bridge stone morning market valley\nletter orchard quiet town paper window\n'}
short = ['bruno.txt', 'dana.txt']

for name, text in files.items():
    where = Path("/app/essays/returned" if name in short else "/app/essays") / name
    if read(where) != text:
        fail(f"{where} does not hold the essay")
    other = Path("/app/essays" if name in short else "/app/essays/returned") / name
    if other.exists():
        fail(f"{other} should not exist")
got = read("/app/too_short.txt").split()
if got != short:
    fail(f"/app/too_short.txt lists {got!r}, expected {short!r}")

print("PASS")
PY
then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
