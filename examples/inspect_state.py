"""Inspecting state (README, "Inspecting state"): a job's keyed state as a DataFrame, one key
group for a key filter, the change feed between two checkpoints, the metadata source, a
point lookup, and a savepoint bootstrapped from a DataFrame. ``python examples/inspect_state.py``.
"""
import os
import sys
import tempfile

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql import SparkSession  # noqa: E402

from statekit import KeyedProcessFunction, MapStateDescriptor, ValueStateDescriptor  # noqa: E402
from statekit.query import QueryableState  # noqa: E402
from statekit.serializers import Int64Serializer  # noqa: E402
from statekit.spark import process_keyed, register_data_sources, write_savepoint  # noqa: E402


class Clicks(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Int64Serializer(), default=0))
        self.pages = ctx.get_state(MapStateDescriptor("pages"))

    def process(self, row, ctx):
        self.count.update(self.count.value() + 1)
        self.pages.put(row["page"], (self.pages.get(row["page"]) or 0) + 1)


spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())  # no console progress bars
spark.sparkContext.setLogLevel("ERROR")
register_data_sources(spark)  # import statekit.spark does it when a session is already active
checkpoints = f"file://{tempfile.mkdtemp()}"
for name, value in {"backend": "rocksdb", "checkpoint.storage": "filesystem", "checkpoint.dir": checkpoints,
                    "checkpoint.incremental": "true"}.items():
    spark.conf.set(f"spark.statekit.{name}", value)
for batch in ([("ann", "/"), ("bob", "/a"), ("ann", "/a")], [("ann", "/b"), ("cid", "/")]):
    process_keyed(spark.createDataFrame(batch, "user string, page string"), "user", Clicks(),
                  "user string", job_id="clicks")

state = spark.read.format("statekit").load(f"{checkpoints}/clicks")      # the latest checkpoint
state.filter("user = 'ann'").select("user", "state", "user_key", "value").show()  # reads one key group
counts = spark.read.format("statekit").option("state", "count").load(f"{checkpoints}/clicks")
counts.select("user", "value").show()                                     # value: bigint (Int64Serializer)
(spark.read.format("statekit").option("changes-from", 1).option("changes-to", 2).option("state", "count")
 .load(f"{checkpoints}/clicks").select("user", "value", "change").show())  # what epoch 2 changed
spark.read.format("statekit-metadata").load(f"{checkpoints}/clicks").select(
    "checkpoint_id", "state", "kind", "parallelism", "recovery").show()
pages = QueryableState(f"{checkpoints}/clicks").get("pages", "ann")
print(pages)                                                              # {'/': 1, '/a': 1, '/b': 1}

initial = spark.createDataFrame([("dan", 41), ("eve", 7)], "user string, count long")
url = write_savepoint(initial, "user", {"count": ValueStateDescriptor("count", Int64Serializer(), default=0)},
                      job_id="clicks-2", savepoint_dir=f"{checkpoints}/savepoints", parallelism=2)
print(QueryableState(url).get("count", "dan"))                            # 41
spark.conf.set("spark.statekit.restore.path", url)  # the next run of job clicks-2 starts from it

assert pages == {"/": 1, "/a": 1, "/b": 1} and {r.user: r.value for r in counts.collect()} == {"ann": 3, "bob": 1, "cid": 1}
print("OK: state read back as written")
