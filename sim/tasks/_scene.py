"""The scene pieces every task's MJCF shares: offscreen buffer size and the checker floor material."""

from __future__ import annotations


def scene_assets(texrepeat: str = "1 1") -> str:
    """`<visual>` plus the opening of `<asset>` with the "grid" texture and material (close `</asset>` after)."""
    return f"""<visual><global offwidth="640" offheight="480"/></visual>
  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1=".1 .2 .3" rgb2=".2 .3 .4" width="300" height="300"/>
    <material name="grid" texture="grid" texrepeat="{texrepeat}" texuniform="true" reflectance=".2"/>"""
