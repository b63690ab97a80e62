"""What scripts/install put in place is consistent: one Spark version on the Python side
and in the jars, and a Kafka source whose calls all resolve."""

import re
import subprocess
import zipfile
from importlib import metadata
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[2]
SPARK_KAFKA_JARS = ROOT / ".cache" / "jars" / "spark-kafka"


def _jar_version(folder: Path, artifact: str) -> str:
    jars = list(folder.glob(f"{artifact}-*.jar"))
    assert len(jars) == 1, f"expected one {artifact} jar in {folder}, found {jars}"
    return jars[0].name[len(artifact) + 1:-len(".jar")]


def test_pyspark_python_and_bundled_jars_report_one_spark_version():
    # pyspark-client installs over pyspark's files; a mismatch shows up exactly here
    jars = Path(pyspark.__file__).parent / "jars"
    assert metadata.version("pyspark") == metadata.version("pyspark-client")
    assert pyspark.__version__ == metadata.version("pyspark")
    assert _jar_version(jars, "spark-core_2.13") == pyspark.__version__
    assert _jar_version(SPARK_KAFKA_JARS, "spark-sql-kafka-0-10_2.13") == pyspark.__version__


def test_kafka_source_finds_every_token_provider_member_it_calls():
    """Maven Central (as reachable here) has no spark-token-provider-kafka for 4.1.x, so
    the pom pins 4.0.0: every member spark-sql-kafka references in it must exist."""
    source = next(SPARK_KAFKA_JARS.glob("spark-sql-kafka-0-10_2.13-*.jar"))
    provider = next(SPARK_KAFKA_JARS.glob("spark-token-provider-kafka-0-10_2.13-*.jar"))
    with zipfile.ZipFile(source) as jar:
        classes = [n[:-6].replace("/", ".") for n in jar.namelist() if n.endswith(".class")]
    constant_pool = subprocess.run(["javap", "-v", "-cp", str(source), *classes],
                                   capture_output=True, text=True, check=True).stdout
    wanted = set(re.findall(r"// (?:Method|InterfaceMethod|Field) "
                            r"(org/apache/spark/kafka010/[\w$]+)\.(\"?[\w$<>]+\"?):(\S+)",
                            constant_pool))
    assert wanted, "found no references into the token provider: the check itself is broken"
    owners = sorted({owner.replace("/", ".") for owner, _, _ in wanted})
    members = subprocess.run(["javap", "-s", "-p", "-cp", str(provider), *owners],
                             capture_output=True, text=True, check=True).stdout
    declared, owner, name = set(), "", None
    for line in members.splitlines():
        if (m := re.match(r"\s+descriptor: (\S+)", line)) and name:
            declared.add((owner, name, m[1]))
        elif m := re.match(r"(?:public |final |abstract )*(?:class|interface) ([\w.$]+)", line):
            owner = m[1].replace(".", "/")
        elif m := re.search(r"([\w.$]+)\(.*\)(?: throws .*)?;$|([\w$]+);$", line):
            name = (m[1] or m[2]).rsplit(".", 1)[-1]
            if m[1] and m[1].replace(".", "/") == owner:  # javap prints a constructor by class name
                name = '"<init>"'
    missing = {w for w in wanted if w not in declared}
    assert not missing, f"spark-sql-kafka calls members the token provider lacks: {missing}"
