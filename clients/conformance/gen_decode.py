#!/usr/bin/env python3
"""Writes decode.json: known ids and what `idmint decode --json` answers for each, so every
client's offline decoder is checked against the real one.

Usage: gen_decode.py IDMINT_BIN > decode.json
Each case names the layout as the CLI takes it (`layout`, or `bits`/`unit`/`epoch` for a custom
one, and `epoch` alone to replace a preset's), the `id` text, and either `expect` (the CLI's JSON
object for it) or `"error": true` (the CLI refused the id: exit 1). The routing helpers have
cases of their own: `layout: "composite"` (a `shard-local` key, `idmint decode --layout
composite`), `step` with optional `offsets` (`idmint decode --step N --offsets A,B`: the residue
class and the member owning it, from 1) and `shards` with a `key` instead of an `id`
(`idmint shard-for --shards N KEY`).
"""
import json
import subprocess
import sys

PRESET_IDS = {
    "twitter": ["1212161076890996736", "1858339354775154688", "0", "1", "4096",
                "9223372036854775807", "9223372036854775808", "18446744073709551616",
                "abc", "-1", "", "1.5"],
    "snowflake": ["1212161076890996736"],
    "instagram": ["1387263000001003521", "8388608", "9223372036854775807", "9223372036854775808"],
    "sonyflake": ["420979706838032640", "65537", "9223372036854775807", "9223372036854775808"],
    "discord": ["175928847299117063", "1196614342393413753", "9223372036854775807"],
    "js53": ["123456789012345", "9007199254740991", "9007199254740992"],
    "uuid7": ["01938f4e-2b5c-7d2a-9c3e-4f5a6b7c8d9e", "01938F4E-2B5C-7D2A-9C3E-4F5A6B7C8D9E",
              "01938f4e2b5c7d2a9c3e4f5a6b7c8d9e", "00000000-0000-7000-8000-000000000000",
              "ffffffff-ffff-7fff-bfff-ffffffffffff", "e6a5f8c4-1a2b-7c3d-8e4f-5a6b7c8d9e0f",
              "01938f4e-2b5c-4d2a-9c3e-4f5a6b7c8d9e", "01938f4e-2b5c-7d2a-cc3e-4f5a6b7c8d9e",
              "01938f4e-2b5c-7d2a-9c3e-4f5a6b7c8d9", "01938f4e+2b5c-7d2a-9c3e-4f5a6b7c8d9e",
              "01938f4e-2b5c-7d2a-9c3e-4f5a6b7c8d9g"],
    "composite": ["42-1007", "0-0", "18446744073709551615-18446744073709551615", "7-9007199254740993",
                  "042-1", "42-01", "-1", "42-", "42", "1-2-3", "+4-2", "4-+2",
                  "18446744073709551616-1", "1-18446744073709551616", "4-x", "-"],
    "ulid": ["01ARZ3NDEKTSV4RRFFQ69G5FAV", "01arz3ndektsv4rrffq69g5fav", "00000000000000000000000000",
             "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "01JDQ3X5ZP8M4V2K9N6R7T3W1Y", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
             "01ARZ3NDEKTSV4RRFFQ69G5FAU", "01ARZ3NDEKTSV4RRFFQ69G5FAI", "01ARZ3NDEKTSV4RRFFQ69G5FA"],
}

CUSTOM = [
    # (bits, unit, epoch, ids)
    ("41,10,12", "1ms", 1288834974657, ["1212161076890996736", "9223372036854775807"]),
    ("39,8,16", "10ms", 1409529600000, ["420979706838032640", "1"]),
    ("30,5,5", "1s", 0, ["123456789012", "1099511627775", "1099511627776"]),
    ("40,10,10", "1us", 1700000000000, ["123456789012345678"]),
    ("41,10,12", "1ms", 0, ["1212161076890996736"]),
]

RESIDUES = [
    # (step, offsets or None, ids)
    (4, [3, 1, 2], ["13", "15", "14", "16", "0", "18446744073709551615", "+1", "-1", "x", ""]),
    (2, [0, 1], ["7", "8"]),
    (3, None, ["16", "9007199254740993"]),
    (1, None, ["12345"]),
]

SHARDS = [
    # (shards, keys)
    (2000, ["31341", "0", "1999", "2000", "18446744073709551615", "+5", "-5", "x", "1.5",
            "18446744073709551616"]),
    (1, ["987654321"]),
    (4096, ["9007199254740993"]),
]

EPOCHS = [("instagram", 1314220021721, "1387263000001003521"), ("twitter", 0, "1212161076890996736")]


def run(binary: str, options: list[str], id_: str, command_name: str = "decode") -> dict[str, object]:
    command = [binary, command_name, *options, "--json", "--", id_]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode == 1:
        return {"error": True}
    if result.returncode != 0:
        raise SystemExit(f"{command}: exit {result.returncode}: {result.stderr}")
    return {"expect": json.loads(result.stdout)}


def main() -> None:
    binary = sys.argv[1]
    cases: list[dict[str, object]] = []
    for layout, ids in PRESET_IDS.items():
        for id_ in ids:
            cases.append({"layout": layout, "id": id_, **run(binary, ["--layout", layout], id_)})
    for layout, epoch, id_ in EPOCHS:
        cases.append({"layout": layout, "epoch": epoch, "id": id_,
                      **run(binary, ["--layout", layout, "--epoch", str(epoch)], id_)})
    for bits, unit, epoch, ids in CUSTOM:
        for id_ in ids:
            cases.append({"bits": [int(b) for b in bits.split(",")], "unit": unit, "epoch": epoch,
                          "id": id_, **run(binary, ["--bits", bits, "--unit", unit,
                                                    "--epoch", str(epoch)], id_)})
    for step, offsets, ids in RESIDUES:
        options = ["--step", str(step)]
        if offsets is not None:
            options += ["--offsets", ",".join(map(str, offsets))]
        for id_ in ids:
            case: dict[str, object] = {"step": step}
            if offsets is not None:
                case["offsets"] = offsets
            cases.append({**case, "id": id_, **run(binary, options, id_)})
    for shards, keys in SHARDS:
        for key in keys:
            cases.append({"shards": shards, "key": key,
                          **run(binary, ["--shards", str(shards)], key, "shard-for")})
    json.dump({"generated_by": "python3 clients/conformance/gen_decode.py target/debug/idmint "
                               "> clients/conformance/decode.json",
               "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
