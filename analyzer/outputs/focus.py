"""Showback's charges as the FinOps Open Cost and Usage Specification (FOCUS) writes a cost and usage dataset:
a row a workload's devices of one GPU model a UTC day, so that gpulens' figures sit beside the cloud bill in a
FinOps tool (docs/showback.md, "FOCUS").

Columns: FOCUS 1.2's (the FinOps Foundation's specification, focus.finops.org; its Mandatory columns, and the
Conditional ones a GPU platform has), in the spec's order (alphabetical), then gpulens' own, prefixed `x_` as
the spec's extensibility rules ask. The dataset is also FOCUS 1.0 (1.2 only added columns): the FinOps
Foundation's validator (focus-validator, which checks 1.0) passes it. The platform is the provider: it bills
its teams' namespaces (sub-accounts) for GPU time, at list prices (no commitments, no discounts), so list,
contracted, billed and effective cost are the same figure.
"""

from __future__ import annotations

import calendar
import csv
import io
import json
import time
from collections.abc import Iterable

from gpulens.analyzer.outputs.showback import Charge
from gpulens.core.times import rfc3339

#: The FOCUS version the columns follow.
FOCUS_VERSION = "1.2"
#: What the platform's GPU time is, in FOCUS' allowed values (ServiceCategory, ServiceSubcategory).
SERVICE_CATEGORY = "AI and Machine Learning"
SERVICE_SUBCATEGORY = "Machine Learning"
#: The unit of every quantity: a device held for an hour (a GPU's, or a MIG instance's, which its price says).
UNIT = "GPU-Hours"

FOCUS_COLUMNS = (
    "AvailabilityZone",
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "CommitmentDiscountUnit",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceId",
    "InvoiceIssuer",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingCurrency",
    "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost",
    "PricingCurrencyListUnitPrice",
    "PricingQuantity",
    "PricingUnit",
    "Provider",
    "Publisher",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceDetails",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "SubAccountType",
    "Tags",
)
#: gpulens' columns: what the charge's hours did (the efficiency FOCUS has no column for) and where they came from.
OWN_COLUMNS = (
    "x_Team",
    "x_Workload",
    "x_WorkloadKind",
    "x_Pods",
    "x_JudgedGpuHours",
    "x_WorkedGpuHours",
    "x_WastedGpuHours",
    "x_WastedCost",
    "x_Source",
    "x_RequestedGpuHours",
    "x_OpenCostCost",
)


def _month(day: str) -> tuple[float, float]:
    """The UTC calendar month `day` ("2026-12-01") falls in, as (start, end) unix seconds: the billing period."""
    year, month = int(day[:4]), int(day[5:7])
    after_year, after_month = (year + 1, 1) if month == 12 else (year, month + 1)
    return calendar.timegm((year, month, 1, 0, 0, 0)), calendar.timegm((after_year, after_month, 1, 0, 0, 0))


def _day_start(day: str) -> float:
    return calendar.timegm(time.strptime(day, "%Y-%m-%d"))


def focus_row(c: Charge, account: str, currency: str) -> dict[str, object]:
    """A charge as a FOCUS row: `account` the platform (cluster) billing its namespaces, `currency` the prices'."""
    period_start, period_end = _month(c.day)
    day_start = _day_start(c.day)
    used = f", {c.used_share:.0%} of it worked" if c.used_share is not None else ", its use unknown"
    sku_price = f"{c.gpu_model}@{c.price_per_hour:g}"
    return {
        "AvailabilityZone": None,
        "BilledCost": c.cost,
        "BillingAccountId": account,
        "BillingAccountName": account,
        "BillingAccountType": "Cluster",
        "BillingCurrency": currency,
        "BillingPeriodEnd": rfc3339(period_end),
        "BillingPeriodStart": rfc3339(period_start),
        "CapacityReservationId": None,
        "CapacityReservationStatus": None,
        "ChargeCategory": "Usage",
        "ChargeClass": None,
        "ChargeDescription": (
            f"{c.gpu_hours:.2f} {UNIT} of {c.gpu_model} held by {c.workload} ({c.pods} "
            f"{'pod' if c.pods == 1 else 'pods'}){used}"
        ),
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": rfc3339(day_start + 86400),
        "ChargePeriodStart": rfc3339(day_start),
        "CommitmentDiscountCategory": None,
        "CommitmentDiscountId": None,
        "CommitmentDiscountName": None,
        "CommitmentDiscountQuantity": None,
        "CommitmentDiscountStatus": None,
        "CommitmentDiscountType": None,
        "CommitmentDiscountUnit": None,
        "ConsumedQuantity": c.gpu_hours,
        "ConsumedUnit": UNIT,
        "ContractedCost": c.cost,
        "ContractedUnitPrice": c.price_per_hour,
        "EffectiveCost": c.cost,
        "InvoiceId": None,
        "InvoiceIssuer": account,
        "ListCost": c.cost,
        "ListUnitPrice": c.price_per_hour,
        "PricingCategory": "Standard",
        "PricingCurrency": currency,
        "PricingCurrencyContractedUnitPrice": c.price_per_hour,
        "PricingCurrencyEffectiveCost": c.cost,
        "PricingCurrencyListUnitPrice": c.price_per_hour,
        "PricingQuantity": c.gpu_hours,
        "PricingUnit": UNIT,
        "Provider": account,
        "Publisher": account,
        "RegionId": None,
        "RegionName": None,
        "ResourceId": c.workload,
        "ResourceName": c.owner or c.workload,
        "ResourceType": c.owner_kind or ("Pod" if c.namespace else "GPU"),
        "ServiceCategory": SERVICE_CATEGORY,
        "ServiceName": "Kubernetes GPUs",
        "ServiceSubcategory": SERVICE_SUBCATEGORY,
        "SkuId": c.gpu_model,
        "SkuMeter": "GPU time",
        "SkuPriceDetails": json.dumps({"x_DeviceHourPrice": c.price_per_hour}),
        "SkuPriceId": sku_price,
        "SubAccountId": c.namespace or None,
        "SubAccountName": c.namespace or None,
        "SubAccountType": "Namespace",
        "Tags": json.dumps({"team": c.team, "workload": c.workload, "workload_kind": c.workload_kind}, sort_keys=True),
        "x_Team": c.team,
        "x_Workload": c.workload,
        "x_WorkloadKind": c.workload_kind,
        "x_Pods": c.pods,
        "x_JudgedGpuHours": c.judged_gpu_hours,
        "x_WorkedGpuHours": c.worked_gpu_hours,
        "x_WastedGpuHours": c.wasted_gpu_hours,
        "x_WastedCost": c.wasted_cost,
        "x_Source": c.source,
        # Empty where not read: kube-state-metrics' requests, OpenCost's price for the hours on nodes it prices.
        "x_RequestedGpuHours": "" if c.requested_gpu_hours is None else c.requested_gpu_hours,
        "x_OpenCostCost": "" if c.opencost_cost is None else c.opencost_cost,
    }


def focus_csv(rows: Iterable[Charge], account: str, currency: str = "USD") -> str:
    """The charges as a FOCUS dataset in CSV (nulls empty, as FOCUS' CSV exports write them)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*FOCUS_COLUMNS, *OWN_COLUMNS], lineterminator="\n")
    writer.writeheader()
    for c in rows:
        writer.writerow({k: "" if v is None else v for k, v in focus_row(c, account, currency).items()})
    return out.getvalue()
