# The one type mini_lb imports from sglang.srt.disaggregation.utils (its /register body).
from typing import Optional

from pydantic import BaseModel


class PDRegistryRequest(BaseModel):
    mode: str
    registry_url: str
    bootstrap_port: Optional[int] = None
