import sys


def tally(path):
	counts = {}
	with open(path) as f:
		for line in f:  
			word = line.strip()
			if not word:
				continue	
			counts[word] = counts.get(word, 0) + 1
	return counts 
	

if __name__ == "__main__":
	for word, n in sorted(tally(sys.argv[1]).items()):
		print(f"{word} {n}")   
