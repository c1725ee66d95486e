package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plot draws throughput against clients, one panel per backend, one line
// per path of paths, from this run's medians, into a PNG file. Excluded
// cells (failed requests) are left out.
func (r *report) plot(name string, paths []path) error {
	all := r.summaries()
	targets := r.targets()
	if len(targets) == 0 {
		return fmt.Errorf("nothing was measured")
	}
	var panels []*plot.Plot
	for _, t := range targets {
		p := plot.New()
		p.Title.Text = t
		p.X.Label.Text = "clients"
		p.Y.Label.Text = "requests / s"
		p.X.Scale = plot.LogScale{}
		var ticks plot.ConstantTicks
		for _, c := range r.opts.clients {
			ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
		}
		p.X.Tick.Marker = ticks
		p.Y.Min = 0
		p.Y.Tick.Marker = wholeTicks{}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		for i, pa := range paths {
			var xys plotter.XYs
			for _, c := range r.opts.clients {
				if s := find(all, t, c, pa); s.usable() {
					xys = append(xys, plotter.XY{X: float64(c), Y: s.tput})
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color = plotutil.Color(i)
			line.Width = vg.Points(1.5)
			if i >= 7 {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			points.Color = plotutil.Color(i)
			points.Shape = plotutil.Shape(i)
			p.Add(line, points)
			p.Legend.Add(string(pa), line, points)
			p.Y.Max = max(p.Y.Max, slices.MaxFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.Y, b.Y) }).Y)
		}
		p.Y.Max *= 1.1
		panels = append(panels, p)
	}
	cols := min(2, len(panels))
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p
	}
	width, height := 6*vg.Inch*vg.Length(cols), 4*vg.Inch*vg.Length(rows)
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 4, PadBottom: vg.Millimeter * 4, PadLeft: vg.Millimeter * 4, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(grid, tiles, dc)
	for i, row := range grid {
		for j, p := range row {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// wholeTicks are the default ticks labelled as whole numbers.
type wholeTicks struct{}

func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', 0, 64)
		}
	}
	return ticks
}
