"""What the plan proposes: an Action a workload (what to change, what it saves, the evidence), the workloads it
does not plan and why (NotPlanned), its sums by team and model (PlanSum), the fleet packed after it (Packed), and
the Plan that holds them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.evidence import duration, gpu_count

MONTH_HOURS = 30 * 24


@dataclass(frozen=True)
class Need:
    """What a unit needs after its change: a `share` of one GPU of a model, whole or shared ("whole", "mig",
    "time-slicing": shares are packed onto GPUs of their own kind only)."""

    gpu_model: str
    share: float
    sharing: str = "whole"
    #: The GPU ("node/uuid") a unit keeps as it is: units that held one GPU in turn need it once.
    board: str = ""


def kept(v: Verdict) -> list[Need]:
    """The GPUs a unit keeps as they are."""
    return [Need(v.gpu_model, 1.0, "whole", f"{v.node}/{gpu.split('/')[0]}") for gpu in v.gpus]


@dataclass
class Action:
    """One workload's change: what to do, the GPUs it holds now and after, and what that saves."""

    namespace: str
    #: The workload as reports name it (Verdict.workload), its team, and its units (pods or GPUs).
    owner: str
    team: str
    action: str
    #: The change in words ("run 1 replica instead of 8").
    what: str
    gpu_model: str
    gpus_now: float
    gpus_after: float
    saving_usd_span: float
    saving_usd_per_30d: float
    confidence: float
    units: list[str]
    #: What was measured, and what was assumed (percentile, headroom, price and its source, span).
    evidence: dict[str, str] = field(default_factory=dict)
    assumptions: dict[str, str] = field(default_factory=dict)
    #: The GPUs (or shares of one) its units need after the change, which the fleet's packing places.
    needs: list[Need] = field(default_factory=list)
    #: The step after it, where its unit's cause and size both call for a change: the fix after a move to a
    #: smaller GPU, or the size after a fix (core.bottlenecks.Bottleneck.fix_before_size); "" where none.
    then: str = ""
    #: The change its workload already went through toward it in the span, and what became of it
    #: (outcomes.mark_done(): "replicas 4 -> 2 at ...: held, saves $120.00 a day"); "" where none.
    done: str = ""

    def change(self) -> str:
        """The change in words, with the step after it where there is one ("move to Tesla T4 ...; then ...")."""
        return f"{self.what}; {self.then}" if self.then else self.what

    def gpus_change(self, arrow: str = "->") -> str:
        """The GPUs it holds now and after, as people read them ("8 -> 1"); "none held" for the cluster's
        actions, which move pods or change settings (what they save is stranded GPU-hours), not "0 -> 0"."""
        if self.action in SCHEDULING_CONFIDENCE:
            return "none held"
        return f"{gpu_count(self.gpus_now)} {arrow} {gpu_count(self.gpus_after)}"


#: The most confidence a replica count sized from GPU activity alone gets (its engine's load sizes it firmly).
GPU_ONLY_REPLICA_CONFIDENCE = 0.5


@dataclass
class NotPlanned:
    owner: str
    units: list[str]
    reason: str


@dataclass
class PlanSum:
    """Actions summed: by team, or the fleet's ("" key)."""

    key: str
    actions: int = 0
    gpus_now: float = 0.0
    gpus_after: float = 0.0
    saving_usd_span: float = 0.0
    saving_usd_per_30d: float = 0.0


@dataclass
class Packed:
    """One GPU model of the fleet after the plan: every unit's need (changed or not) packed onto its GPUs,
    first-fit decreasing, and what that frees. Freed GPUs below zero are GPUs to add (a cheaper model the
    fleet does not have yet); nodes are freed whole, assuming pods may move between nodes of the model."""

    gpu_model: str
    gpus_present: int
    nodes_present: int
    gpus_needed: int
    #: The least GPUs any packing could use: the whole GPUs, and each kind of share's sum rounded up.
    lower_bound: int
    gpus_freed: int
    nodes_freed: int
    saving_usd_per_30d: float


@dataclass
class Plan:
    actions: list[Action]
    not_planned: list[NotPlanned]
    span_seconds: float
    #: The fleet's total, and the teams', most saving first.
    total: PlanSum
    by_team: list[PlanSum]
    #: Per GPU model, the fleet's GPUs and nodes the actions free once packed.
    fleet: list[Packed] = field(default_factory=list)
    #: Seconds of samples a month is projected from (Thresholds.plan_projection_min_seconds): over a shorter
    #: span every output says what the actions saved in the span, and no per-30-day figure.
    projection_min_seconds: float = 0.0
    #: When it was made: the time of the newest sample it read (unix seconds; 0 without one), so that a plan kept
    #: as a file can be shown against the changes made after it (docs/changes.md).
    made_at: float = 0.0

    @property
    def projected(self) -> bool:
        """Whether the span is long enough to project 30 days from."""
        return self.span_seconds >= self.projection_min_seconds

    def saving(self, per_30d: float, in_span: float) -> str:
        """A saving as the outputs say it: per 30 days, or where the span is too short to project one, what it
        saved in the span."""
        if self.projected:
            return f"${per_30d:,.0f} per 30 days"
        return f"${in_span:,.2f} in the {duration(self.span_seconds)} seen"

    def held(self, arrow: str = "->") -> str:
        """The GPUs the actions change, now and after, with what the count covers: each unit's GPUs whenever
        in the span it ran, so that a span with pods that came and went counts each of them (a day of a live
        analyzer's history beside a report of the last hours differ for that). The cluster's actions hold none."""
        units = sum(len(a.units) for a in self.actions if a.action not in SCHEDULING_CONFIDENCE)
        return (
            f"GPUs held {gpu_count(self.total.gpus_now)} {arrow} {gpu_count(self.total.gpus_after)} (by the {units:,} "
            f"pod{'s' if units != 1 else ''} and GPUs it changes, each counted whenever it ran in the "
            f"{duration(self.span_seconds)} seen)"
        )

    def unprojected(self) -> str:
        """Why no per-30-day figure is given ("" where one is)."""
        if self.projected:
            return ""
        least = duration(self.projection_min_seconds)
        return f"no month projected from under {least} of samples"

    def to_dict(self) -> dict:
        """The JSON of the plan: `plan`, one object per action, and `plan_summary`, its sums, what it did not
        plan and why, and the fleet once packed. Per-30-day figures are null over a span too short to
        project them (`projected` false)."""

        return {
            "plan": self.action_documents(),
            "plan_summary": {
                "made_at": self.made_at,
                "span_seconds": self.span_seconds,
                "projected": self.projected,
                "projection_min_seconds": self.projection_min_seconds,
                "total": self._month(asdict(self.total)),
                "by_team": [self._month(asdict(s)) for s in self.by_team],
                "not_planned": [asdict(n) for n in self.not_planned],
                "fleet": [self._month(asdict(p)) for p in self.fleet],
            },
        }

    def action_documents(self) -> list[dict]:
        """One document per action, as every machine output (JSON, CSV) writes it: the per-30-day saving null
        over a span too short to project a month from."""
        return [self._month(asdict(a)) for a in self.actions]

    def _month(self, document: dict) -> dict:
        return document if self.projected else {**document, "saving_usd_per_30d": None}


#: What the cluster's actions are sure of: consolidation and quotas are read from kube-state-metrics' own
#: word; bin-packing and re-pooling assume the waits to come are like those seen.
SCHEDULING_CONFIDENCE = {"consolidate": 0.9, "add_quota": 0.9, "bin_pack": 0.8, "re_pool": 0.8}
