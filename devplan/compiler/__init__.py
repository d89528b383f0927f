"""`devplan.compile`: the pipeline as a row of stages, each a plain function.

per method (forward, then --method's), in driver.py:
load [-> llm] [-> quantize] -> attention [-> backends: ExecuTorch's partitioners and preprocess]
     -> split (from_exported) [-> adopt: the backends' delegates as foreign calls]
     -> the graph passes before fold (decompose, permutes, broadcasts), each Lowered -> Lowered
     -> fold: by --fold's policy, or each policy tried and the least kept (fold_choice.py)
then, in lower.py: the graph passes after fold (views, sizes)
     [-> partition -> each delegate_group: results_on_device, lower_method (as a payload), to_program, dumps_pte]
     -> lower_method: build_method -> method passes (copies, alias, compact, [place,] concat, schedule,
                      inplace), each Method -> Method -> plan_method
then every planned method, constant methods too -> to_program -> pte_image (the pieces of the
     file: the weights stay the tensors they are, never copied) -> write (streamed, piece by piece);
     with external_constants, to_program gives the weights to ExternalWeights, whose image (the
     .ptd) is written first. The pass tables are the `Pipeline` the driver is given
(devplan/passes); each stage runs through `Stages` (stages.py); the result is result.py's.
"""

from devplan.compiler.driver import compile
from devplan.compiler.result import CompileResult

__all__ = ["CompileResult", "compile"]
